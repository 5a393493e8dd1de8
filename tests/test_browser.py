"""What a student sees: notebooks 01-03 in JupyterLab, in headless Chromium driven by Playwright.

Every cell runs; every figure cell shows an image; every explorer draws its figure on its canvas
in the page. The numbers each frame draws (counts, level, kappa) are checked against sera's own
functions at every setting visited: after each drag, after the arrow keys move each slider (which
must also say its label and value to a screen reader) and with every control at its ends. One
slider per explorer is dragged by the mouse for a second, three times: the figure must redraw
during each drag, however long that takes; no speed is asserted (benchmarks/slider_frames.py
measures it). Frames a second while dragging, the messages the page sends meanwhile and the time
from release to the last frame are printed. The explorer at rest is compared pixel by pixel with
the figure matplotlib draws at the same settings (saved side by side in build/browser/). The
exercises run in JupyterLab as the instructor's copy (every check passes) and as the student
release (every check says it is not done yet), and the static site opens from disk with the
network refused (formulas rendered, images loaded, every explorer of 01-03 moving with no kernel,
drawing sera's numbers). `make test-browser` installs Debian's chromium and runs this file (part
of `make test`); elsewhere it skips.
"""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if os.environ.get("SERA_REQUIRE_BROWSER"):  # make test-browser: missing pieces are errors
    import playwright.sync_api as playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is not installed"
else:
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make test-browser installs it)",
                    allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "build" / "browser"
NOTEBOOKS = ["01_finite_rollout_fidelity", "02_waterline_allocation", "03_allocation_vs_success"]
EXERCISES = sorted(p.stem for p in (ROOT / "notebooks" / "exercises").glob("*.ipynb"))
SETTINGS = {  # render every cell, keep the copy unsaved, no news pop-up
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 serving a copy of the notebooks (figures land in the copy)."""
    import nbformat

    from sera.teaching import release

    root = tmp_path_factory.mktemp("lab")
    (root / "notebooks").mkdir()
    for name in NOTEBOOKS:
        shutil.copy(ROOT / "notebooks" / f"{name}.ipynb", root / "notebooks")
    # the exercises twice: the instructor's sources, and the student release of each
    for folder in ("exercises", "student"):
        (root / "notebooks" / folder).mkdir()
    for name in EXERCISES:
        source = ROOT / "notebooks" / "exercises" / f"{name}.ipynb"
        shutil.copy(source, root / "notebooks" / "exercises")
        nb = nbformat.read(source, as_version=4)
        nb.cells = [release.student_cell(cell) for cell in nb.cells]
        nbformat.write(nb, root / "notebooks" / "student" / f"{name}.ipynb")
    settings = root / "settings"
    for name, values in SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = secrets.token_hex(12)
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings)}
    log = open(root / "server.log", "w")  # noqa: SIM115 - closed with the server
    # started as the README says, `make lab`, with the options a headless test needs
    options = " ".join(["--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
                        f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True"])
    server = subprocess.Popen(
        # -o: this test's environment is the one to use, never one (re)built by make
        ["make", "--no-print-directory", "-C", str(ROOT), "-o", ".venv/.installed", "lab",
         f"BIN={Path(sys.executable).parent}",
         f"LAB_ROOT={root}", f"LAB_OPTIONS={options}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            assert server.poll() is None, (root / "server.log").read_text()
            time.sleep(0.1)
    # the address `make lab` opens is the first notebook
    assert _redirect(f"http://127.0.0.1:{port}/?token={token}") == \
        "/lab/tree/notebooks/01_finite_rollout_fidelity.ipynb"
    yield f"http://127.0.0.1:{port}", token
    os.killpg(server.pid, signal.SIGTERM)  # make and the JupyterLab it started
    server.wait(30)
    log.close()


def _redirect(url: str) -> str:
    """The path the server sends a browser that opens url to (its last redirect)."""
    import urllib.parse
    import urllib.request

    return urllib.parse.urlsplit(urllib.request.urlopen(url, timeout=30).geturl()).path


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield chromium
        chromium.close()


KERNEL_IDLE = """() => { const w = window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return k && k.status === 'idle'; }"""
ALL_RAN = """() => { const w = window.jupyterapp.shell.currentWidget;
  return [...w.content.widgets].every(c => c.model.type !== 'code' ||
    (c.model.executionCount !== null && !c.promptNode.textContent.includes('*'))); }"""


# Every frame an explorer draws, timed (its canvas counts them in data-frames), and the page's
# messages to the server (while a slider moves: any frame it asks the kernel for).
FRAME_COUNTER = """(() => {
  new MutationObserver(changes => {
    for (const change of changes)
      (change.target.seraFrames ||= []).push(performance.now());
  }).observe(document, { subtree: true, attributes: true, attributeFilter: ['data-frames'] });
  for (const [type, key] of [['pointerdown', 'seraDown'], ['pointerup', 'seraUp']])
    document.addEventListener(type, () => { window[key] = performance.now(); }, true);
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (data) {
    (window.seraSends ||= []).push(performance.now());
    return send.call(this, data);
  };
})()"""
DRAGS = 3  # drags per explorer: one drag's rate varies by a fifth from one run to the next


def _open_and_run(page, url, token, name):
    # a fresh workspace per notebook, so that the tab in front is this one
    workspace = name.replace("/", "-")
    page.goto(f"{url}/lab/workspaces/{workspace}/tree/notebooks/{name}.ipynb?reset&token={token}")
    page.wait_for_function("window.jupyterapp !== undefined", timeout=120_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_function(KERNEL_IDLE, timeout=120_000)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    try:
        page.wait_for_function(ALL_RAN, timeout=150_000, polling=500)
        page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    except playwright.TimeoutError:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=SHOTS / f"{name.replace('/', '-')}_stuck.png", full_page=True)
        raise


def _figure_cells(page):
    """For each code cell whose source ends by showing `fig`: its output kinds."""
    return page.evaluate("""() => [...window.jupyterapp.shell.currentWidget.content.widgets]
      .filter(c => c.model.type === 'code' &&
                   c.model.sharedModel.getSource().trim().split('\\n').pop().trim() === 'fig')
      .map(c => [...c.node.querySelectorAll('.jp-OutputArea-output')]
                 .map(o => o.querySelector('img') ? 'image' : o.textContent.slice(0, 60)))""")


def _tracebacks(page) -> int:
    return page.locator(".jp-OutputArea-output[data-mime-type="
                        "'application/vnd.jupyter.stderr']").count() + \
        page.locator(".jp-OutputArea-output:has-text('Traceback')").count()


FRAMES = "node => node.seraFrames || []"


def _frames(explorer) -> list:
    """The times (ms, page clock) at which the explorer drew a frame."""
    return explorer.evaluate(FRAMES)


def _drawn(explorer) -> bool:
    """The explorer's canvas has drawn a frame of the figure (not a text repr)."""
    return explorer.evaluate("""node => { const c = node.querySelector('canvas');
      return !!c && c.width > 100 && Number(node.dataset.frames) > 0 && !!c.dataset.numbers &&
             !node.textContent.includes('Explorer('); }""")


def _inputs(explorer):
    return explorer.locator("input[type=range], select")


def _shown(explorer) -> tuple[list[int], dict]:
    """The stops the drawn frame is at and the numbers drawn, as the page holds them."""
    at, numbers = explorer.evaluate("""node => { const c = node.querySelector('canvas');
      return [c.dataset.at, c.dataset.numbers]; }""")
    return [int(i) for i in at.split(",")], json.loads(numbers)


def _set(page, explorer, index: int, stop: int) -> float:
    """Put control `index` at `stop` as a hand would let go of it there (the page's input and
    change events); return the seconds until the explorer drew that setting."""
    control = _inputs(explorer).nth(index)
    before = len(_frames(explorer))
    start = time.perf_counter()
    control.evaluate("""(node, stop) => { node.value = String(stop);
      node.dispatchEvent(new Event('input', {bubbles: true}));
      node.dispatchEvent(new Event('change', {bubbles: true})); }""", stop)
    page.wait_for_function(
        "([node, index, stop]) => node.querySelector('canvas').dataset.at"
        ".split(',')[index] === String(stop)", arg=[explorer.element_handle(), index, stop],
        timeout=60_000)
    seconds = time.perf_counter() - start
    assert len(_frames(explorer)) > before
    return seconds


def _settle(page, explorer, quiet: float = 1.0) -> None:
    """Wait until the explorer has drawn no frame for `quiet` seconds."""
    settled, count = time.perf_counter(), len(_frames(explorer))
    while time.perf_counter() - settled < quiet:
        page.wait_for_timeout(100)
        if len(_frames(explorer)) != count:
            settled, count = time.perf_counter(), len(_frames(explorer))


def _drag(page, explorer, seconds: float = 1.0, steps: int = 60, quiet: float = 1.0):
    """Drag the explorer's first slider by the mouse over `seconds` in small steps, then wait
    until the figure settles; return (frames a second during the drag, seconds from release to
    the last frame, frames from the press on, messages the page sent a second during the
    drag)."""
    control = explorer.locator("input[type=range]").first
    control.evaluate("n => n.scrollIntoView({block: 'center'})")
    _settle(page, explorer, quiet)  # the hand comes to a figure at rest
    box = control.bounding_box()
    value, top = int(control.input_value()), int(control.get_attribute("max"))
    x = box["x"] + 8 + (box["width"] - 16) * value / top  # the thumb
    y = box["y"] + box["height"] / 2
    span = 0.4 * box["width"] * (1 if value < top / 2 else -1)
    page.mouse.move(x, y)
    page.mouse.down()
    start = time.perf_counter()
    for step in range(1, steps + 1):
        page.mouse.move(x + span * step / steps, y)
        time.sleep(max(0.0, start + seconds * step / steps - time.perf_counter()))
    page.mouse.up()
    _settle(page, explorer, quiet)
    down, up = page.evaluate("[window.seraDown, window.seraUp]")
    frames = _frames(explorer)
    during = [t for t in frames if down <= t <= up]
    sent = [t for t in page.evaluate("window.seraSends || []") if down <= t <= up]
    return (len(during) / ((up - down) / 1000), max(0.0, (frames[-1] - up) / 1000),
            sum(t >= down for t in frames), len(sent) / ((up - down) / 1000))


def _labels(explorer):
    return explorer.evaluate("node => [...node.querySelectorAll('label')].map(l => l.textContent)")


def _keys(page, explorer) -> None:
    """Each slider moves with the arrow keys and says its label and value to a screen reader."""
    for index in range(_inputs(explorer).count()):
        control = _inputs(explorer).nth(index)
        if control.evaluate("n => n.tagName") != "INPUT":
            continue
        label = explorer.locator(f"label[for='{control.get_attribute('id')}']").inner_text()
        value = int(control.input_value())
        control.focus()
        key = "ArrowLeft" if value == int(control.get_attribute("max")) else "ArrowRight"
        page.keyboard.press(key)
        moved = value + (1 if key == "ArrowRight" else -1)
        assert int(control.input_value()) == moved, label
        assert control.get_attribute("aria-valuetext").startswith(label), label
        page.wait_for_function("([node, index, stop]) => node.querySelector('canvas').dataset.at"
                               ".split(',')[index] === String(stop)",
                               arg=[explorer.element_handle(), index, moved], timeout=60_000)


def _oracle(name: str, settings: dict) -> dict:
    """What sera's own functions give at the explorer's settings (not its plot function)."""
    import numpy as np

    import sera
    from sera.fidelity import kappa
    from sera.plotting.fidelity import tilt_vectors

    if name == "kappa":
        return {"kappa": float(kappa(settings["p"], settings["n"]))}
    if name == "tilt":
        v = tilt_vectors(**settings)
        return {"counts": list(v["counts"]), "kappa": list(v["kappa"])}
    p = np.random.default_rng(settings["seed"]).beta(settings["a"], settings["b"],
                                                     settings["batch"])
    budget = settings["batch"] * settings["n0"]
    if name == "waterline":
        if not settings["n_min"] <= settings["n0"] <= settings["n_max"]:
            return {}
        result = sera.allocate(np.sort(p), budget, settings["n_min"],
                               min(settings["n_max"], budget), rule=settings["method"])
        return {"counts": result.counts.tolist(), "level": result.level}
    if not 2 <= settings["n0"] <= settings["n_max"]:
        return {}
    result = sera.allocate(p, budget, 2, settings["n_max"], u_min=settings["u_min"])
    return {"counts": result.counts.tolist(), "retained": result.retained.tolist()}


def _agrees(name: str, explorer, kernel) -> dict:
    """The numbers the page drew against sera's at the page's setting: integers exactly,
    floats to 1e-9. Returns the settings."""
    at, numbers = _shown(explorer)
    settings = kernel.settings(dict(zip(kernel._controls, at, strict=True)))
    for key, want in _oracle(name, settings).items():
        assert key in numbers, (name, settings, numbers)
        got = numbers[key]
        if isinstance(want, float) or (isinstance(want, list) and any(
                isinstance(w, float) for w in want)):
            assert max(abs(g - w) for g, w in zip(*(
                (got, want) if isinstance(want, list) else ([got], [want])), strict=True)) \
                <= 1e-9, (name, settings, key)
        else:
            assert got == want, (name, settings, key)
    return settings


def _pixels(explorer):
    """The explorer's canvas as an RGB array."""
    import base64
    import io

    import numpy as np
    import PIL.Image

    url = explorer.evaluate("node => node.querySelector('canvas').toDataURL('image/png')")
    data = base64.b64decode(url.split(",", 1)[1])
    return np.asarray(PIL.Image.open(io.BytesIO(data)).convert("RGB")).astype(int)


def _beside_the_figure(explorer, kernel, settings, shot: Path) -> float:
    """The canvas at rest beside the figure matplotlib draws at the same settings (saved side by
    side in `shot`); returns the share of pixels of either that differ by more than 128 levels
    from every pixel of the other within two pixels (the browser sets text with its own
    hinting)."""
    import matplotlib as mpl
    import numpy as np
    import PIL.Image
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from sera.plotting.style import RC

    kernel.set(**settings)
    canvas = FigureCanvasAgg(kernel.figure)
    with mpl.rc_context(RC):  # as the figure cell draws it
        canvas.draw()
    figure = np.asarray(canvas.buffer_rgba())[..., :3].astype(int)
    page = _pixels(explorer)
    assert page.shape == figure.shape, (page.shape, figure.shape)
    gap = np.full((figure.shape[0], 12, 3), 255)
    PIL.Image.fromarray(np.concatenate([page, gap, figure], axis=1).astype(np.uint8)).save(shot)

    def one_way(a, b):
        padded = np.pad(b, ((2, 2), (2, 2), (0, 0)), mode="edge")
        h, w = a.shape[:2]
        return np.min([np.abs(a - padded[dy:dy + h, dx:dx + w]).max(axis=2)
                       for dy in range(5) for dx in range(5)], axis=0) > 128

    return float((one_way(page, figure) | one_way(figure, page)).mean())


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_in_the_browser(lab, browser, name):
    from sera.teaching import widgets

    url, token = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.add_init_script(FRAME_COUNTER)
    started = time.perf_counter()
    _open_and_run(page, url, token, name)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SHOTS / f"{name}.png")
    figures = _figure_cells(page)
    assert figures and all("image" in kinds for kinds in figures), figures
    explorers = page.locator(".sera-explorer")
    assert explorers.count() >= 1
    assert _tracebacks(page) == 0
    _check_the_quiz(page)
    times, drags, far = [], [], {}
    for index in range(explorers.count()):
        explorer = explorers.nth(index)
        explorer.scroll_into_view_if_needed()
        page.wait_for_function("node => Number(node.dataset.frames) > 0",
                               arg=explorer.element_handle(), timeout=60_000)
        assert _drawn(explorer), f"explorer {index} draws no figure (is anywidget's JupyterLab " \
            f"extension installed?): {explorer.inner_text()[:200]!r}"
        kind = explorer.get_attribute("data-name")
        kernel = widgets.EXPLORERS[kind]()  # the same explorer here, to read stops as values
        labels = _labels(explorer)
        assert labels and all(" " in label for label in labels), labels  # readable labels
        _agrees(kind, explorer, kernel)
        for _ in range(DRAGS):  # back and forth: _drag heads for the far end of the track
            drags.append(_drag(page, explorer))
            assert _tracebacks(page) == 0, f"{name}: drag in explorer {index}"
            _agrees(kind, explorer, kernel)
        _keys(page, explorer)
        _agrees(kind, explorer, kernel)
        for control in range(_inputs(explorer).count()):  # every control to its ends
            top = _inputs(explorer).nth(control).evaluate(
                "n => n.tagName === 'SELECT' ? n.options.length - 1 : Number(n.max)")
            for stop in (0, top):
                times.append(_set(page, explorer, control, stop))
                assert _tracebacks(page) == 0, f"{name}: {labels[control]} at stop {stop}"
                _agrees(kind, explorer, kernel)
        for control in range(_inputs(explorer).count()):  # back to the start, at rest
            _set(page, explorer, control, kernel.values[list(kernel._controls)[control]])
        _settle(page, explorer, quiet=1.0)
        page.wait_for_function("node => node.querySelector('canvas').dataset.rest === 'true'",
                               arg=explorer.element_handle(), timeout=60_000)  # laid out
        at, _ = _shown(explorer)
        settings = kernel.settings(dict(zip(kernel._controls, at, strict=True)))
        far[kind] = _beside_the_figure(explorer, kernel, settings,
                                       SHOTS / f"{kind}_page_beside_figure.png")
        assert far[kind] < 0.005, f"{kind}: {far[kind]:.1%} of the page's pixels are not the " \
            f"figure's (see {SHOTS}/{kind}_page_beside_figure.png)"
        kernel.close()
        page.screenshot(path=SHOTS / f"{name}_explorer{index}.png")
    moved = sorted(times)
    fps = sorted(f for f, _, _, _ in drags)
    latency = sorted(lag for _, lag, _, _ in drags)
    sent = sorted(rate for _, _, _, rate in drags)
    print(f"\n{name}: ran in {time.perf_counter() - started:.0f} s; {len(moved)} controls let go, "
          f"drawn there after {moved[len(moved) // 2]:.2f} s median, {moved[-1]:.2f} s slowest; "
          f"{len(drags)} drags of 1 s: {fps[len(fps) // 2]:.1f} frames/s median, "
          f"{fps[0]:.1f} slowest, the page sending {sent[len(sent) // 2]:.1f} messages/s; "
          f"release to last frame {latency[len(latency) // 2]:.2f} s median, "
          f"{latency[-1]:.2f} s slowest; pixels off the figure: "
          + ", ".join(f"{k} {v:.2%}" for k, v in far.items()))
    page.close()
    # Every drag redrew the figure, however long a busy machine took (benchmarks/slider_frames.py
    # measures the rate; no test asserts a speed).
    assert all(redraws > 0 for _, _, redraws, _ in drags), f"{name}: a drag redrew nothing"


def _printed(page) -> str:
    return "\n".join(page.evaluate("""() => [...document.querySelectorAll(
      '.jp-Notebook .jp-OutputArea-output')].map(o => o.innerText)"""))


@pytest.mark.parametrize("name", EXERCISES)
def test_exercise_in_the_browser(lab, browser, name):
    """An exercise as the instructor's copy (every check passes) and as the student release,
    untouched (every check says it is not done yet), each message once, no traceback."""
    import nbformat

    url, token = lab
    source = nbformat.read(ROOT / "notebooks" / "exercises" / f"{name}.ipynb", as_version=4)
    checks = sum(cell.source.count("sera.teaching.course.check_") for cell in source.cells[2:])
    assert checks >= 1
    for folder, expected in (("exercises", "PASS "), ("student", "not done yet")):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        _open_and_run(page, url, token, f"{folder}/{name}")
        printed = _printed(page)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=SHOTS / f"exercise_{folder}_{name}.png")
        assert printed.count(expected) == checks, (folder, printed)
        assert "Traceback" not in printed and _tracebacks(page) == 0, (folder, printed)
        if folder == "student":
            assert "PASS " not in printed
        page.close()


def _check_the_quiz(page) -> None:
    """The self-check quiz: every choice starts folded, and opening one shows the reply to that
    choice: "Right." for one choice of the first question, "Not this one." and a reply of its
    own for each other choice."""
    folds = page.locator("details").filter(has=page.locator("summary", has_text="(a) "))
    assert folds.count() >= 2, "no self-check quiz on the page"
    question = page.locator("details")
    start = next(i for i in range(question.count())
                 if question.nth(i).locator("summary").inner_text().startswith("(a) "))
    replies = []
    for i in range(start, question.count()):
        fold = question.nth(i)
        summary = fold.locator("summary").inner_text()
        if replies and summary.startswith("(a) "):
            break  # the next question
        fold.scroll_into_view_if_needed()
        assert not fold.evaluate("d => d.open")
        fold.locator("summary").click()
        assert fold.evaluate("d => d.open")
        replies.append(fold.inner_text()[len(summary):].strip())
    assert len(replies) >= 2 and sum(r.startswith("Right.") for r in replies) == 1, replies
    wrong = [r for r in replies if not r.startswith("Right.")]
    assert all(r.startswith("Not this one.") and len(r) > 30 for r in wrong), wrong
    assert len(set(replies)) >= 2


def test_the_static_site_offline(browser, tmp_path):
    """The site as a fresh clone builds it (no executed copies: 01-03 and the exercises run now,
    04-08 show the committed figures and their stored tables), opened from disk with every network
    request refused: each page loads, its formulas render as MathML with a size on screen, every
    image loads, no raw TeX and no build-machine path shows."""
    import base64

    import nbformat

    from sera.teaching import notebooks as runner
    from sera.teaching import widgets

    pages = runner.build_site(executed=tmp_path / "none", output=tmp_path / "site")
    sources = runner.notebooks(ROOT / "notebooks")
    exercises = runner.notebooks(ROOT / "notebooks" / "exercises")
    assert len(pages) == len(sources) + len(exercises) + 3
    for path in sources:
        html = (tmp_path / "site" / f"{path.stem}.html").read_text()
        if path.name[:2] in runner.QUICK:
            assert "data:image/png;base64" in html and runner.COMMITTED_NOTE[:40] not in html
            continue
        assert "built without running the notebook" in html, path.name
        # the stored tables the prose quotes, read when the page was built
        stored = [c for c in nbformat.read(path, as_version=4).cells
                  if runner.STORED in c.metadata.get("tags", [])]
        assert html.count("<table") >= sum("round(3)" in c.source for c in stored), path.name
        if stored:
            assert "<table" in html and "sera-rate" in html, path.name
        for name in runner.declared_figures(path):  # every figure it declares, as committed
            png = base64.b64encode((ROOT / "figures" / f"{name}.png").read_bytes()).decode()
            assert png[:200] in html, (path.name, name)
    first = (tmp_path / "site" / f"{sources[0].stem}.html").read_text()
    assert first.count('displaystyle="true"') >= 1  # sympy's results as MathML, not raw TeX
    exercise = (tmp_path / "site" / "exercises" / f"{exercises[0].stem}.html").read_text()
    assert "not done yet" in exercise and "BEGIN SOLUTION" not in exercise
    stored_pages = {f"{p.stem}.html" for p in sources if any(
        runner.STORED in c.metadata.get("tags", []) for c in nbformat.read(p, as_version=4).cells)}
    assert len(stored_pages) >= 3, stored_pages
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    refused = []

    def offline(route):
        if route.request.url.startswith("file:"):
            return route.continue_()
        refused.append(route.request.url)
        return route.abort()

    page.route("**/*", offline)
    shown = {}
    for path in pages:
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        state = page.evaluate("""() => ({
          text: document.body.innerText,
          // heading anchors repeat a heading's formula in a link shown only on hover
          math: [...document.querySelectorAll('math')].filter(m => m.checkVisibility()).length,
          sized: [...document.querySelectorAll('math')].filter(m => {
            const r = m.getBoundingClientRect();
            return m.checkVisibility() && r.width > 0 && r.height > 0; }).length,
          images: [...document.images].length,
          tables: [...document.querySelectorAll('table')].filter(t => t.checkVisibility()).length,
          broken: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length,
        })""")
        shown[path.name] = state
        assert state["broken"] == 0, (path.name, state["images"])
        assert "$$" not in state["text"] and "SERAMATH" not in state["text"], path.name
        assert "\\displaystyle" not in state["text"], path.name  # sympy's output as MathML
        assert "/tmp/" not in state["text"] and str(ROOT) not in state["text"], path.name
        assert state["sized"] == state["math"], path.name
        if path.name in stored_pages:  # the stored tables on screen, beside the figures
            assert state["tables"] > 0 and state["images"] > 0, (path.name, state)
    site_drags = []
    for name in NOTEBOOKS:  # the explorers move with no kernel and draw sera's numbers
        page.goto((tmp_path / "site" / f"{name}.html").as_uri())
        page.add_script_tag(content=FRAME_COUNTER)
        explorers = page.locator(".sera-explorer")
        assert explorers.count() >= 1, name
        for index in range(explorers.count()):
            explorer = explorers.nth(index)
            page.wait_for_function("node => node.dataset.ready === 'true'",
                                   arg=explorer.element_handle(), timeout=60_000)
            kind = explorer.get_attribute("data-name")
            kernel = widgets.EXPLORERS[kind]()
            _agrees(kind, explorer, kernel)
            for _ in range(DRAGS):
                site_drags.append(_drag(page, explorer, quiet=0.3))
                _agrees(kind, explorer, kernel)
            _keys(page, explorer)  # each control from the start, the others put back
            at, _ = _shown(explorer)
            assert sum(a != s for a, s in zip(at, kernel.values.values(), strict=True)) == 1
            _agrees(kind, explorer, kernel)
            kernel.close()
    assert all(redraws > 0 for _, _, redraws, _ in site_drags)
    assert not refused, refused[:3]
    page.goto(pages[0].as_uri())
    _check_the_quiz(page)
    first = shown[f"{NOTEBOOKS[0]}.html"]
    assert first["math"] > 0 and first["images"] > 0, first  # the run notebook: formulas, figures
    assert "κ" in shown["NOTATION.html"]["text"]  # the notation page: plain Unicode symbols
    assert "live in JupyterLab" in shown["index.html"]["text"]
    page.screenshot(path=tmp_path / "site.png")
    page.close()
    fps = sorted(f for f, _, _, _ in site_drags)
    print(f"\nsite: {len(pages)} pages offline, {sum(s['math'] for s in shown.values())} "
          f"formulas and {sum(s['images'] for s in shown.values())} images rendered; "
          f"{len(refused)} network requests refused; {len(site_drags)} drags of 1 s: "
          f"{fps[len(fps) // 2]:.1f} frames/s median, {fps[0]:.1f} slowest")
