"""What a student sees: notebooks 01-03 in JupyterLab, in headless Chromium driven by Playwright.

Every cell runs; every figure cell shows an image; every explorer renders its sliders and a live
figure (an image widget that has loaded, not a text repr); each slider moved to its ends (and the
two-slider combinations that once reached an infeasible budget) redraws its figure and never shows
a traceback. One slider per explorer is dragged by the mouse for a second, three times: the figure
must redraw after each drag (frames counted as loads of the figure's image), however long that
takes; no speed is asserted (benchmarks/slider_frames.py measures it). Update times (typed value to
redrawn figure), frames a second while dragging and the latency from release to the last redraw are
printed; screenshots go to build/browser/. The exercises run in JupyterLab as the instructor's copy
(every check passes) and as the student release (every check says it is not done yet), and the
static site opens from disk with the network refused (formulas rendered, images loaded). `make
test-browser` installs Debian's chromium and runs this file (part of `make test`); elsewhere it
skips.
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
# Moves that once reached an infeasible budget: (explorer index in the notebook, slider label
# start, value), in order.
COMBINATIONS = {
    "02_waterline_allocation": [[(0, "fewest rollouts", 8), (0, "rollouts per prompt", 7)]],
    "03_allocation_vs_success": [[(0, "most rollouts", 8), (0, "rollouts per prompt", 9)]],
}
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


# Every image load in the page, timed: an explorer's figure is an image whose source each frame
# replaces, so the timestamps on a figure's image are its redraws.
FRAME_COUNTER = """(() => {
  document.addEventListener('load', event => {
    const image = event.target;
    if (image instanceof HTMLImageElement && image.isConnected)
      (image.seraFrames ||= []).push(performance.now());
  }, true);
  for (const [type, key] of [['pointerdown', 'seraDown'], ['pointerup', 'seraUp']])
    document.addEventListener(type, () => { window[key] = performance.now(); }, true);
  // the page's messages to the server: while a slider moves, its updates to the kernel
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


FRAMES = """node => [...node.querySelectorAll('img')].map(c => c.seraFrames || [])
  .reduce((all, times) => all.concat(times), []).sort((a, b) => a - b)"""


def _frames(explorer) -> list:
    """The times (ms, page clock) at which the explorer's figure was painted."""
    return explorer.evaluate(FRAMES)


def _live_figure(explorer) -> bool:
    """The figure is an image widget that has loaded a frame (not 'Image(...)' as text)."""
    return explorer.evaluate("""node => { const c = node.querySelector('img.widget-image');
      return !!c && c.naturalWidth > 100 && (c.seraFrames || []).length > 0 &&
             !node.textContent.includes('Image('); }""")


def _control(page, explorer, label: str):
    return explorer.locator(".widget-inline-hbox").filter(
        has=page.locator("label", has_text=label)).first


def _now(control) -> str:
    """The control's current value, as the page shows it."""
    select = control.locator("select")
    if select.count():
        return select.input_value()
    return control.locator(".noUi-handle").first.get_attribute("aria-valuenow")


def _set(page, explorer, label: str, value) -> float:
    """Type a value into the readout of the control whose label holds `label`, or pick it in a
    dropdown; return the seconds until the explorer's image changed (0 when the value did not
    change: already there, or held back by a linked slider)."""
    control = _control(page, explorer, label)
    # the last move's frames (its redraw at rest included) have landed, so that the frame
    # waited for below is this move's
    _settle(page, explorer, quiet=0.5)
    before, old = len(_frames(explorer)), _now(control)
    start = time.perf_counter()
    select = control.locator("select")
    if select.count():
        select.select_option(str(value))
    else:
        readout = control.locator(".widget-readout")
        readout.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(str(value))
        page.keyboard.press("Enter")
    page.wait_for_timeout(50)
    if _now(control) == old:
        return 0.0
    page.wait_for_function(f"([node, before]) => ({FRAMES})(node).length > before",
                           arg=[explorer.element_handle(), before], timeout=30_000)
    return time.perf_counter() - start


def _settle(page, explorer, quiet: float = 1.0) -> None:
    """Wait until the explorer's figure has not been painted for `quiet` seconds."""
    settled, count = time.perf_counter(), len(_frames(explorer))
    while time.perf_counter() - settled < quiet:
        page.wait_for_timeout(100)
        if len(_frames(explorer)) != count:
            settled, count = time.perf_counter(), len(_frames(explorer))


def _drag(page, explorer, seconds: float = 1.0, steps: int = 60):
    """Drag the explorer's first slider handle by the mouse over `seconds` in small steps, then
    wait until the figure settles; return (frames a second during the drag, seconds from
    release to the last redraw, redraws from the press on, messages the page sent a second
    during the drag)."""
    control = explorer.locator(".widget-slider").first
    control.scroll_into_view_if_needed()
    _settle(page, explorer)  # the hand comes to a figure at rest
    handle = control.locator(".noUi-handle").first.bounding_box()
    track = control.locator(".noUi-target").first.bounding_box()
    x, y = handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2
    span = 0.4 * track["width"] * (1 if x < track["x"] + track["width"] / 2 else -1)
    page.mouse.move(x, y)
    page.mouse.down()
    start = time.perf_counter()
    for step in range(1, steps + 1):
        page.mouse.move(x + span * step / steps, y)
        time.sleep(max(0.0, start + seconds * step / steps - time.perf_counter()))
    page.mouse.up()
    _settle(page, explorer)
    down, up = page.evaluate("[window.seraDown, window.seraUp]")
    frames = _frames(explorer)
    during = [t for t in frames if down <= t <= up]
    sent = [t for t in page.evaluate("window.seraSends || []") if down <= t <= up]
    return (len(during) / ((up - down) / 1000), max(0.0, (frames[-1] - up) / 1000),
            sum(t >= down for t in frames), len(sent) / ((up - down) / 1000))


def _labels(explorer):
    return explorer.evaluate("""node => [...node.querySelectorAll(
      '.widget-slider > label, .widget-dropdown > label')].map(label => label.textContent)""")


def _ends(page, explorer, label):
    """The values to try: a slider's current ends (they move with linked sliders) or a
    dropdown's options."""
    control = _control(page, explorer, label)
    select = control.locator("select")
    if select.count():
        return [o.get_attribute("value") for o in select.locator("option").all()]
    handle = control.locator(".noUi-handle").first
    return [_number(handle.get_attribute("aria-valuemin")),
            _number(handle.get_attribute("aria-valuemax"))]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_in_the_browser(lab, browser, name):
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
    assert explorers.count() >= 1 and page.locator(".widget-slider").count() >= 2
    assert _tracebacks(page) == 0
    _check_the_quiz(page)
    times, drags = [], []
    for index in range(explorers.count()):
        explorer = explorers.nth(index)
        explorer.scroll_into_view_if_needed()
        page.wait_for_function("node => node.querySelector('img.widget-image') !== null",
                               arg=explorer.element_handle(), timeout=30_000)
        page.wait_for_timeout(500)
        assert _live_figure(explorer), f"explorer {index} shows no live figure (is ipywidgets" \
            f"' JupyterLab extension installed?): {explorer.inner_text()[:200]!r}"
        labels = _labels(explorer)
        assert labels and all(" " in label for label in labels), labels  # readable labels
        for _ in range(DRAGS):  # back and forth: _drag heads for the far end of the track
            drags.append(_drag(page, explorer))
            assert _tracebacks(page) == 0, f"{name}: drag in explorer {index}"
        for label in labels:
            for value in _ends(page, explorer, label):
                times.append(_set(page, explorer, label, value))
                assert _tracebacks(page) == 0, f"{name}: {label} = {value}"
        _settle(page, explorer, quiet=0.5)
        page.screenshot(path=SHOTS / f"{name}_explorer{index}.png")
    for moves in COMBINATIONS.get(name, []):
        for index, label, value in moves:
            times.append(_set(page, explorers.nth(index), label, value))
            assert _tracebacks(page) == 0, moves
            # (that the figure drew the allocation, not "does not fit", is drawn in pixels:
            # tests/test_widgets.py::test_linked_sliders_never_reach_an_infeasible_budget)
    moved = sorted(t for t in times if t > 0)
    fps = sorted(f for f, _, _, _ in drags)
    latency = sorted(lag for _, lag, _, _ in drags)
    sent = sorted(rate for _, _, _, rate in drags)
    print(f"\n{name}: ran in {time.perf_counter() - started:.0f} s; {len(moved)} slider updates, "
          f"median {moved[len(moved) // 2]:.2f} s, slowest {moved[-1]:.2f} s; {len(drags)} "
          f"drags of 1 s: {fps[len(fps) // 2]:.1f} frames/s median, {fps[0]:.1f} slowest, "
          f"the page sending {sent[len(sent) // 2]:.1f} messages/s (ipywidgets holds a slider's "
          f"next update until the kernel has answered the last); "
          f"release to last redraw {latency[len(latency) // 2]:.2f} s median, "
          f"{latency[-1]:.2f} s slowest")
    page.close()
    # Every drag redrew the figure, however long a busy machine took (benchmarks/slider_frames.py
    # measures the rate; no test asserts a speed).
    assert all(redraws > 0 for _, _, redraws, _ in drags), f"{name}: a drag redrew nothing"


def _number(text: str):
    value = float(text)
    return int(value) if value.is_integer() else round(value, 2)


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
    page.goto(pages[0].as_uri())
    _check_the_quiz(page)
    first = shown[f"{NOTEBOOKS[0]}.html"]
    assert first["math"] > 0 and first["images"] > 0, first  # the run notebook: formulas, figures
    assert "κ" in shown["NOTATION.html"]["text"]  # the notation page: plain Unicode symbols
    assert "live in JupyterLab" in shown["index.html"]["text"]
    page.screenshot(path=tmp_path / "site.png")
    page.close()
    print(f"\nsite: {len(pages)} pages offline, {sum(s['math'] for s in shown.values())} "
          f"formulas and {sum(s['images'] for s in shown.values())} images rendered; "
          f"{len(refused)} network requests refused")
