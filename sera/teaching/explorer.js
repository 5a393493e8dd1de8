// The page side of sera.teaching.widgets.Explorer (an anywidget): the controls, and a canvas on
// which every frame is drawn from the kernel's drawing instructions (sera/teaching/page_figure.py).
// Frames are kept by the stops the controls are at; a drag draws from the tracks the kernel sent,
// and asks the kernel only for a frame it does not hold. With no kernel (the static site) every
// control's track at the starting values is in the page, and one control moves at a time.

const MOVETO = 1, LINETO = 2, CURVE3 = 3, CURVE4 = 4, CLOSEPOLY = 79;
const CAPS = { butt: "butt", round: "round", projecting: "square" };
const STYLE = `
.sera-explorer { contain: content; font: 13px "DejaVu Sans", sans-serif; }
.sera-explorer .sera-control { display: flex; align-items: center; gap: 8px; margin: 2px 0; }
.sera-explorer label { flex: 0 0 300px; text-align: right; }
.sera-explorer input[type=range] { flex: 0 0 260px; }
.sera-explorer output { min-width: 4em; }
.sera-explorer canvas { display: block; margin-top: 4px; }
.sera-explorer .sera-note { font-style: italic; }`;
const images = new Map(); // PNG data -> a decoded Image (a heat map, a colour bar)

async function inflate(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return JSON.parse(await new Response(stream).text());
}

function fromBase64(text) {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

function rgba(c) {
  return `rgba(${255 * c[0]},${255 * c[1]},${255 * c[2]},${c[3]})`;
}

// A path of flat [x0, y0, x1, y1, ...] points in pixels from the lower left, with matplotlib's
// codes (none: a move, then straight lines), drawn at (dx, dy).
function trace(ctx, points, codes, dx, dy, height) {
  const x = (i) => dx + points[2 * i];
  const y = (i) => height - dy - points[2 * i + 1];
  for (let i = 0; i < points.length / 2; i++) {
    const c = codes ? codes[i] : i === 0 ? MOVETO : LINETO;
    if (c === MOVETO) ctx.moveTo(x(i), y(i));
    else if (c === LINETO) ctx.lineTo(x(i), y(i));
    else if (c === CURVE3) {
      ctx.quadraticCurveTo(x(i), y(i), x(i + 1), y(i + 1));
      i += 1;
    } else if (c === CURVE4) {
      ctx.bezierCurveTo(x(i), y(i), x(i + 1), y(i + 1), x(i + 2), y(i + 2));
      i += 2;
    } else if (c === CLOSEPOLY) ctx.closePath();
  }
}

function paint(ctx, op) {
  if (op.fill) {
    ctx.fillStyle = rgba(op.fill);
    ctx.fill();
  }
  if (op.stroke) {
    ctx.strokeStyle = rgba(op.stroke);
    ctx.lineWidth = op.width;
    ctx.setLineDash(op.dash || []);
    ctx.lineDashOffset = op.offset || 0;
    ctx.lineCap = CAPS[op.cap] || "butt";
    ctx.lineJoin = op.join || "miter";
    ctx.stroke();
  }
}

// Draw instructions in the figure's pixels (origin at the lower left, as matplotlib's).
function draw(ctx, ops, height, redraw) {
  for (const op of ops) {
    ctx.save();
    if (op.clip) {
      const [x, y, w, h] = op.clip;
      ctx.beginPath();
      ctx.rect(x, height - y - h, w, h);
      ctx.clip();
    }
    if (op.path) {
      ctx.beginPath();
      trace(ctx, op.path, op.codes, 0, 0, height);
      paint(ctx, op);
    } else if (op.marker) {
      for (let i = 0; i < op.at.length; i += 2) {
        ctx.beginPath();
        trace(ctx, op.marker, op.codes, op.at[i], op.at[i + 1], height);
        paint(ctx, op);
      }
    } else if (op.text !== undefined) {
      ctx.font = `${op.weight} ${op.size}px "${op.font}", "DejaVu Sans", sans-serif`;
      ctx.fillStyle = rgba(op.fill);
      ctx.translate(op.x, height - op.y);
      ctx.rotate((-op.angle * Math.PI) / 180);
      ctx.fillText(op.text, 0, 0);
    } else if (op.image) {
      let image = images.get(op.image);
      if (!image) {
        image = new Image();
        image.onload = redraw;
        image.src = `data:image/png;base64,${op.image}`;
        images.set(op.image, image);
      }
      if (image.complete) ctx.drawImage(image, op.x, height - op.y - op.h, op.w, op.h);
    }
    ctx.restore();
  }
}

function staticModel(state) {
  const data = { ...state, static: true, frame: fromBase64(state.frame) };
  return {
    get: (name) => data[name],
    set: (name, value) => { data[name] = value; },
    save_changes() {},
    send() {},
    on() {},
    off() {},
  };
}

function render({ model, el }) {
  const controls = model.get("controls");
  const [width, height] = model.get("size");
  const alone = Boolean(model.get("static"));
  const start = controls.map((c) => model.get("values")[c.name]);
  const at = start.slice(); // the stop each control is at in the page
  const frames = new Map(); // "i,j,k" (stops) -> {track, i}
  const key = (stops) => stops.join(",");
  let asked = null; // the frame asked of the kernel and not yet answered
  let pending = false;
  let shown = null;

  const root = document.createElement("div");
  root.className = "sera-explorer";
  const style = document.createElement("style");
  style.textContent = STYLE;
  root.append(style);
  root.dataset.frames = "0";
  root.dataset.name = model.get("name");
  // keys go to the controls, not to JupyterLab's shortcuts (arrows move between cells there)
  root.dataset.lmSuppressShortcuts = "true";
  root.addEventListener("keydown", (event) => {
    if (event.target.matches("input, select")) event.stopPropagation();
  });
  const inputs = controls.map((control, j) => {
    const row = document.createElement("div");
    row.className = "sera-control";
    const id = `sera-${model.get("name")}-${control.name}-${Math.random().toString(36).slice(2)}`;
    const label = document.createElement("label");
    label.htmlFor = id;
    label.textContent = control.label;
    const output = document.createElement("output");
    output.htmlFor = id;
    let input;
    if (control.choice) {
      input = document.createElement("select");
      control.labels.forEach((text, i) => input.add(new Option(text, String(i))));
    } else {
      input = document.createElement("input");
      input.type = "range";
      input.min = "0";
      input.max = String(control.labels.length - 1);
      input.step = "1";
    }
    input.id = id;
    input.dataset.name = control.name;
    input.value = String(at[j]);
    const say = () => {
      output.textContent = control.labels[at[j]];
      input.setAttribute("aria-valuetext", `${control.label}: ${control.labels[at[j]]}`);
    };
    say();
    input.addEventListener("input", () => {
      at[j] = Number(input.value);
      if (alone) // on a page with no kernel, the others go back to where they started
        controls.forEach((_, k) => {
          if (k !== j && at[k] !== start[k]) {
            at[k] = start[k];
            inputs[k].input.value = String(start[k]);
            inputs[k].say();
          }
        });
      say();
      request();
    });
    input.addEventListener("change", () => {
      if (alone) return;
      const values = {};
      controls.forEach((c, k) => { values[c.name] = at[k]; });
      model.set("values", values);
      model.save_changes();
    });
    input.addEventListener("pointerdown", () => model.send({ want: control.name }));
    input.addEventListener("focus", () => model.send({ want: control.name }));
    if (control.choice) {
      row.append(label, input);
    } else {
      row.append(label, input, output);
    }
    root.append(row);
    return { input, say };
  });
  const canvas = document.createElement("canvas");
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  canvas.style.maxWidth = "100%";
  canvas.style.objectFit = "contain";
  canvas.setAttribute("role", "img");
  root.append(canvas);
  if (alone) {
    const note = document.createElement("p");
    note.className = "sera-note";
    note.textContent = "On this page one control moves at a time, from where the figure " +
      "starts; in JupyterLab they combine.";
    root.append(note);
  }
  const ctx = canvas.getContext("2d");

  function show() {
    pending = false;
    const entry = frames.get(key(at));
    if (!entry) return ask();
    const { track, i } = entry;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.fillStyle = "white";
    ctx.fillRect(0, 0, width, height);
    draw(ctx, track.backdrops[track.backdrop[i]], height, request);
    draw(ctx, track.frames[i], height, request);
    shown = key(at);
    canvas.dataset.at = shown;
    canvas.dataset.numbers = JSON.stringify(track.numbers[i]);
    canvas.dataset.rest = String(entry.rest); // laid out for its own setting
    canvas.setAttribute("aria-label", describe(track.numbers[i]));
    root.dataset.frames = String(Number(root.dataset.frames) + 1);
  }

  function describe(numbers) {
    if (numbers && numbers.message) return numbers.message;
    return `figure at ${controls.map((c, k) => `${c.label} ${c.labels[at[k]]}`).join(", ")}`;
  }

  function request() {
    if (!pending) {
      pending = true;
      requestAnimationFrame(show);
    }
  }

  function ask() {
    if (alone || asked !== null) return;
    const values = {};
    controls.forEach((c, k) => { values[c.name] = at[k]; });
    asked = key(at);
    model.send({ frame: values });
  }

  // A frame at rest (laid out for its own setting) is never replaced by a track's frame of
  // the same setting, which keeps the layout of the rest its track was drawn from.
  function keep(stops, track, rest = false) {
    track.frames.forEach((_, i) => {
      const k = key(stops(i));
      if (rest || !(frames.get(k) || {}).rest) frames.set(k, { track, i, rest });
    });
    if (shown !== key(at) && frames.has(key(at))) request();
  }

  function keepTrack(name, base, track) {
    const j = controls.findIndex((c) => c.name === name);
    const stops = controls.map((c) => base[c.name]);
    keep((i) => { const s = stops.slice(); s[j] = i; return s; }, track);
  }

  async function rest() {
    const frame = await inflate(model.get("frame"));
    const stops = controls.map((c) => frame.at[c.name]);
    keep(() => stops, { frames: [frame.ops], backdrop: [0], backdrops: [[]],
      numbers: [frame.numbers] }, true);
    if (key(stops) === key(at)) request();
  }

  model.on("change:frame", rest);
  model.on("msg:custom", async (message, buffers) => {
    const track = await inflate(buffers[0]);
    if (message.kind === "track") keepTrack(message.name, message.at, track);
    else if (message.kind === "frame") {
      const stops = controls.map((c) => message.at[c.name]);
      asked = null;
      keep(() => stops, track);
      request();
    }
  });
  el.append(root);
  rest().then(async () => {
    if (alone) {
      for (const t of model.get("tracks"))
        keepTrack(t.name, t.at, await inflate(fromBase64(t.data)));
      root.dataset.ready = "true";
    } else {
      model.send({ hello: true });
    }
  });
  return () => {
    model.off("change:frame", rest);
  };
}

export default { render };
