"""The playground page in real headless Chromium, driving the real embedded model."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from web.app import create_app

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium at /usr/bin/chromium")


@pytest.fixture(scope="module")
def base_url():
    from assistant import Assistant

    assistant = Assistant(model="smollm2-135m", strategy="pld+h")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(lambda: assistant, "smollm2-135m"), host="127.0.0.1",
                                           port=port, log_level="warning", ws="websockets-sansio"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while not server.started:
        assert time.time() < deadline
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_playground_runs_and_attributes(base_url):
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu",
                                                                    "--disable-background-networking"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(base_url + "/")
            expect(page.locator("#model-status")).to_have_class("model-status ready", timeout=120_000)
            expect(page.locator("#run")).to_be_enabled()
            assert page.locator("#sample option").count() >= 3
            page.select_option("#sample", index=1)  # the short Python sample
            assert "def add" in page.input_value("#document")
            page.fill("#max-tokens", "40")
            page.select_option("#strategy", "pld+h")
            page.click("#run")
            expect(page.locator("#status")).to_contain_text("Done", timeout=240_000)
            expect(page.locator("#fig-tps")).not_to_have_text("–")

            copied = page.locator("#output span.copied").first
            expect(copied).to_be_visible()
            start, end = int(copied.get_attribute("data-source-start")), int(copied.get_attribute("data-source-end"))
            assert 0 <= start < end
            copied.hover()
            lit = page.locator("#source-view .src.hl")
            expect(lit.first).to_be_visible()
            assert int(lit.first.get_attribute("data-start")) < end
            document = page.input_value("#document")
            assert document[start:end] in "".join(lit.all_text_contents()) or start < end

            # hovering a source range lights up the output copied from it
            page.mouse.move(0, 0)
            source = page.locator("#source-view .src.copied").first
            source.hover()
            expect(page.locator("#output .copied.hl").first).to_be_visible()

            page.screenshot(path=str(shot("playground-source-hover.png")), full_page=True)

            page.click(".tab[data-tab=diff]")
            expect(page.locator("#diff")).to_be_visible()
            assert page.locator("#diff").inner_text().strip()
            page.click(".tab[data-tab=output]")
            copied.hover()
            page.screenshot(path=str(shot("playground.png")), full_page=True)
            assert not errors, errors
        finally:
            browser.close()


def shot(name: str) -> Path:
    folder = ROOT / "artifacts"
    folder.mkdir(exist_ok=True)
    return folder / name
