"""`longctx explain --html` in a real browser: Debian's headless Chromium, driven through
Selenium, with the network cut off. The page must load with no console error and no request,
hovering the binding peak's op must show the plan file's peak_nvidia_smi_bytes as the page
formats bytes, and dragging or turning the wheel over the plot must change the ops in view.

LONGCTX_CLI names the longctx binary. Skips, saying why, only where Chromium cannot start;
under CI (CI set), where scripts/setup.sh installs it, that is a failure instead.
"""
import json
import os
import shutil
import subprocess

import pytest

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
from selenium.webdriver.common.by import By

LONGCTX = os.environ.get("LONGCTX_CLI", "longctx")


def longctx(*args):
    done = subprocess.run([LONGCTX, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"longctx {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def format_bytes(b):
    """units.cpp's format_bytes: two decimals of the largest unit under the value (fmt, like
    Python, rounds an exact tie to even)."""
    if abs(b) < 1024:
        return f"{b} B"
    for k, unit in enumerate(["KiB", "MiB", "GiB"], start=1):
        if abs(b) < 1024 ** (k + 1):
            return f"{b / 1024 ** k:.2f} {unit}"
    return f"{b / 1024 ** 4:.2f} TiB"


def cannot_start(reason):
    if os.environ.get("CI"):
        pytest.fail(f"Chromium cannot start under CI, where scripts/setup.sh installs it: {reason}")
    pytest.skip(f"Chromium cannot start here: {reason} (scripts/setup.sh installs the chromium and chromium-driver packages)")


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not chromium or not driver_path:
        cannot_start("no chromium or chromedriver on PATH")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1200",
                # No name resolves: a request for anything outside the page would fail, and show.
                "--host-resolver-rules=MAP * ~NOTFOUND", "--no-proxy-server"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        # Both paths given: Selenium asks no driver manager to download anything.
        driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    except WebDriverException as e:
        cannot_start(str(e).splitlines()[0])
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions",
                           {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def cuda_plan(tmp_path_factory):
    """A 1B plan on two H100s whose loss runs in tiles: a workspace spike at a few ops, an
    allocator reserve and a context, so the binding figure is above allocated."""
    folder = tmp_path_factory.mktemp("report")
    plan = folder / "plan.json"
    longctx("plan", "--model", "llama-3.2-1b", "--gpus", "2", "--seq", "64K", "--no-search", "--ulysses", "2",
            "--checkpoint", "full", "--loss-tiles", "4", "-o", str(plan))
    return plan


def write_page(plan, page):
    out = longctx("explain", str(plan), "--html", str(page))
    assert f"wrote {page}" in out
    return page


def load(browser, page):
    browser.get(page.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert not errors, errors
    requests = browser.execute_script("return performance.getEntriesByType('resource').map(r => r.name)")
    assert requests == [], f"the page asked for {requests}"
    return json.loads(browser.find_element(By.ID, "report-data").get_attribute("textContent"))


def binding_figures(data):
    """Per op: reserved (delta-coded) plus the context, as the page reads them."""
    out, v = [], 0
    for d in data["ops"]["reserved"]:
        v += d
        out.append(v + data["context"])
    return out


def column_of(op, start, end, columns):
    """The page's columns: column c covers ops [start + floor(c n / cols), start + floor((c+1) n / cols))."""
    n = end - start
    return max(c for c in range(columns) if start + (c * n) // columns <= op)


def hover_op(browser, op):
    """Moves the pointer over the column that holds `op` and returns the readout's op and figure."""
    canvas = browser.find_element(By.ID, "device")
    start, end, columns = (int(canvas.get_attribute(a)) for a in ("data-view-start", "data-view-end", "data-columns"))
    assert start <= op < end
    left, width = 80, int(canvas.get_attribute("width")) - 80 - 12  # the page's PLOT margins
    x = left + (column_of(op, start, end, columns) + 0.5) * width / columns
    size = canvas.size
    ActionChains(browser).move_to_element_with_offset(canvas, round(x - size["width"] / 2), 0).perform()
    readout = browser.find_element(By.ID, "readout")
    figure = browser.find_element(By.ID, "ro-binding")
    return int(readout.get_attribute("data-op")), figure.text, int(figure.get_attribute("data-bytes"))


def view(browser):
    canvas = browser.find_element(By.ID, "device")
    return int(canvas.get_attribute("data-view-start")), int(canvas.get_attribute("data-view-end"))


def test_hovering_the_peak_op_shows_the_plans_binding_figure(browser, cuda_plan, tmp_path):
    data = load(browser, write_page(cuda_plan, tmp_path / "report.html"))
    peak_bytes = json.loads(cuda_plan.read_text())["prediction"]["peak_nvidia_smi_bytes"]
    figures = binding_figures(data)
    peak_op = figures.index(max(figures))
    assert max(figures) == peak_bytes and data["peak_op"] == peak_op
    assert peak_bytes > data["plan"]["prediction"]["peak_device_bytes"], "the plan has a reserve and a context above allocated"

    # Somewhere else first, so that the peak's figure is what the hover brought.
    first_op, first_text, first_bytes = hover_op(browser, 0)
    assert first_text == format_bytes(figures[first_op]) and first_bytes == figures[first_op]
    assert first_text != format_bytes(peak_bytes)

    op, text, exact = hover_op(browser, peak_op)
    assert op == peak_op
    assert text == format_bytes(peak_bytes)
    assert exact == peak_bytes
    assert browser.find_element(By.ID, "peak-figure").text == format_bytes(peak_bytes)
    live = browser.find_elements(By.CSS_SELECTOR, "#ro-tensors tr")
    assert len(live) > 1, "the tensors live at the peak are listed"
    sizes = [int(r.find_elements(By.TAG_NAME, "td")[2].get_attribute("data-bytes")) for r in live[:-1]]
    assert sizes == sorted(sizes, reverse=True), "largest first"


def test_drag_and_wheel_zoom_and_reset(browser, cuda_plan, tmp_path):
    data = load(browser, write_page(cuda_plan, tmp_path / "report.html"))
    n = data["ops"]["count"]
    assert view(browser) == (0, n)
    full_range = browser.find_element(By.ID, "range").text
    canvas = browser.find_element(By.ID, "device")
    width = canvas.size["width"]
    # Drag across the middle fifth of the plot.
    ActionChains(browser).move_to_element_with_offset(canvas, -width // 10, 0).click_and_hold() \
        .move_by_offset(width // 5, 0).release().perform()
    start, end = view(browser)
    assert 0 < start < end < n and end - start < n / 2, (start, end)
    assert browser.find_element(By.ID, "range").text != full_range
    # The wheel, turned toward the page, zooms in further around the pointer.
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(canvas, 0, 0), 0, -200).perform()
    start2, end2 = view(browser)
    assert start <= start2 and end2 <= end and end2 - start2 < end - start, (start2, end2)
    # Zoomed in, an op in view still hovers to its own figure.
    figures = binding_figures(data)
    op, text, _ = hover_op(browser, (start2 + end2) // 2)
    assert start2 <= op < end2 and text == format_bytes(figures[op])
    browser.find_element(By.ID, "reset").click()
    assert view(browser) == (0, n)
    assert browser.find_element(By.ID, "range").text == full_range


def test_the_knobs_and_the_ladder_when_the_plan_file_holds_one(browser, cuda_plan, tmp_path):
    data = load(browser, write_page(cuda_plan, tmp_path / "report.html"))
    assert browser.find_element(By.ID, "ladder-section").get_attribute("hidden") is not None, "no ladder in a plain plan file"
    knobs = browser.find_element(By.ID, "knobs").text
    assert "parallel.loss_tiles" in knobs and "parallel.ulysses" in knobs
    # A plan file carrying the ladder max-context found (as max-context --json gives it).
    answer = json.loads(longctx("max-context", "--model", "tiny-gqa", "--gpu", "cpu", "--gpus", "1", "--budget", "64MiB", "--json"))
    with_ladder = json.loads(cuda_plan.read_text())
    with_ladder["ladder"] = answer["ladder"]
    plan = tmp_path / "with-ladder.json"
    plan.write_text(json.dumps(with_ladder))
    load(browser, write_page(plan, tmp_path / "ladder.html"))
    assert browser.find_element(By.ID, "ladder-section").get_attribute("hidden") is None
    rows = browser.find_elements(By.CSS_SELECTOR, "#ladder tr")
    assert len(rows) == 1 + len(answer["ladder"])
    last = answer["ladder"][-1]
    cells = rows[-1].find_elements(By.TAG_NAME, "td")
    assert cells[1].text == f"{last['max_tokens']:,}"
    # Each rung's granularity beside its length, as the text answer gives it.
    granularity = last["granularity_tokens"]
    assert cells[2].text == ("exact" if granularity <= 1 else f"{granularity:,}")


def test_a_cpu_plan_binds_on_allocated(browser, tmp_path):
    plan = tmp_path / "cpu.json"
    longctx("plan", "--model", "tiny-gqa", "--gpu", "cpu", "--gpus", "1", "--seq", "2K", "--budget", "64MiB", "-o", str(plan))
    load(browser, write_page(plan, tmp_path / "cpu.html"))
    peak = json.loads(plan.read_text())["prediction"]
    assert peak["peak_nvidia_smi_bytes"] == peak["peak_device_bytes"]
    assert browser.find_element(By.ID, "peak-figure").text == format_bytes(peak["peak_device_bytes"])
    assert browser.find_element(By.ID, "headline").text.startswith("allocated peak")
