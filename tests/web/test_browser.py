"""The playground page in real headless Chromium, driving the real embedded model."""

from __future__ import annotations

from pathlib import Path

import pytest
from playground import FakeAssistant, serve

from assistant.checks import Problem
from assistant.engine.events import NOTHING, Repair
from assistant.web.app import create_app

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium at /usr/bin/chromium")


@pytest.fixture(scope="module")
def base_url():
    from assistant import Assistant

    assistant = Assistant(model="smollm2-135m", strategy="pld+h")
    with serve(create_app(lambda: assistant, "smollm2-135m")) as address:
        yield f"http://{address}"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu",
                                                                    "--disable-background-networking"])
        try:
            yield browser
        finally:
            browser.close()


def test_playground_runs_and_attributes(base_url, browser):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(base_url + "/")
        expect(page.locator("#model-status")).to_have_class("model-status ready", timeout=120_000)
        expect(page.locator("#run")).to_be_enabled()
        # the samples load beside the model's status: wait for them, never assume which comes first
        expect(page.locator("#sample option").nth(2)).to_be_attached()
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
        page.close()


def shot(name: str) -> Path:
    folder = ROOT / "artifacts"
    folder.mkdir(exist_ok=True)
    return folder / name


# ---------------------------------------------------------------- the page's own duties, with a fake assistant

def run_in_page(page, base_url: str, document: str, max_tokens: int | None = None) -> None:
    """Run a rewrite of `document` in the page; Max tokens is left as the page starts unless `max_tokens`."""
    from playwright.sync_api import expect

    page.goto(base_url + "/")
    expect(page.locator("#run")).to_be_enabled(timeout=60_000)
    page.fill("#document", document)
    page.fill("#instruction", "Copy it.")
    if max_tokens is not None:
        page.fill("#max-tokens", str(max_tokens))
    page.click("#run")
    expect(page.locator("#run")).to_be_enabled(timeout=60_000)  # the run has ended


@pytest.fixture(scope="module")
def fake():
    return FakeAssistant(chars=3, step_seconds=0.0)


@pytest.fixture(scope="module")
def fake_url(fake):
    with serve(create_app(lambda: fake, "fake")) as address:
        yield f"http://{address}"


def test_page_leaves_the_token_limit_to_the_engine_unless_set(fake_url, fake, browser):
    """A pasted file must not stop at a limit the user never chose: an empty Max tokens is not sent."""
    page = browser.new_page()
    try:
        run_in_page(page, fake_url, "def add(a, b):\n    return a + b\n")
        assert page.input_value("#max-tokens") == "" and fake.asked[-1] is None
        run_in_page(page, fake_url, "def add(a, b):\n    return a + b\n", max_tokens=40)
        assert fake.asked[-1] == 40
    finally:
        page.close()


def test_page_says_no_change_made_with_what_changed(browser):
    from playwright.sync_api import expect

    with serve(create_app(lambda: FakeAssistant(step_seconds=0.0, change="comments"), "fake")) as address:
        page = browser.new_page()
        try:
            run_in_page(page, f"http://{address}", "def add(a, b):\n    return a + b\n")
            expect(page.locator("#no-change")).to_have_text("No change made: only comments changed")
            assert page.locator("#status").inner_text().startswith("No change made: only comments changed")
            expect(page.locator("#unfinished")).to_be_hidden()
        finally:
            page.close()


def test_page_slices_by_code_points(fake_url, browser):
    """The server's offsets are code points; after an emoji, UTF-16 slicing would shift every piece."""
    document = "# 😀 smile, 𝒳 marks it\ndef add(a, b):\n    return a + b  # 🎉\n"
    page = browser.new_page()
    try:
        run_in_page(page, fake_url, document)
        assert page.locator("#status").inner_text().startswith("Done")
        pieces = page.locator("#output span")
        assert "".join(pieces.all_text_contents()) == document
        copied = page.locator("#output span.copied")
        assert copied.count() > 3
        for i in range(copied.count()):
            span = copied.nth(i)
            start, end = int(span.get_attribute("data-source-start")), int(span.get_attribute("data-source-end"))
            assert span.text_content() == document[start:end], (start, end)
        sources = page.locator("#source-view .src")
        assert "".join(sources.all_text_contents()) == document
        for i in range(sources.count()):
            span = sources.nth(i)
            start, end = int(span.get_attribute("data-start")), int(span.get_attribute("data-end"))
            assert span.text_content() == document[start:end], (start, end)
        last = copied.last
        last.hover()  # its source lights up: the same characters
        assert page.locator("#source-view .src.hl").first.text_content() == last.text_content()
    finally:
        page.close()


def test_page_marks_an_unfinished_answer(fake_url, browser):
    from playwright.sync_api import expect

    page = browser.new_page()
    try:
        run_in_page(page, fake_url, "def add(a, b):\n    return a + b\n", max_tokens=2)
        expect(page.locator("#unfinished")).to_be_visible()
        assert "token limit" in page.locator("#unfinished").inner_text()
        status = page.locator("#status")
        assert status.inner_text().startswith("Unfinished") and "Max tokens" in status.inner_text()
        assert "error" in status.get_attribute("class")
        page.fill("#max-tokens", "256")
        page.click("#run")
        expect(page.locator("#status")).to_contain_text("Done", timeout=60_000)
        expect(page.locator("#unfinished")).to_be_hidden()
    finally:
        page.close()


def test_page_marks_a_failed_answer(browser):
    from playwright.sync_api import expect

    with serve(create_app(lambda: FakeAssistant(step_seconds=0.0, fail_after=2), "fake")) as address:
        page = browser.new_page()
        try:
            run_in_page(page, f"http://{address}", "def add(a, b):\n    return a + b\n")
            expect(page.locator("#unfinished")).to_be_visible()
            assert "the rewrite failed" in page.locator("#unfinished").inner_text()
            assert page.locator("#output span").count() == 2  # what came before the failure, marked
        finally:
            page.close()


def test_samples_arriving_late_never_replace_what_the_user_typed(fake_url, browser):
    """The first sample fills an empty page only: a paste made before the samples load is kept."""
    page = browser.new_page()
    held = []
    page.route("**/api/samples", lambda route: held.append(route))  # answered only once the user has typed
    try:
        page.goto(fake_url + "/")
        page.wait_for_function("document.readyState === 'complete'")
        page.fill("#document", "my own text\n")
        page.fill("#instruction", "Copy it.")
        while not held:
            page.wait_for_timeout(50)
        held[0].continue_()
        page.wait_for_function("document.querySelectorAll('#sample option').length >= 2")
        assert page.input_value("#document") == "my own text\n"
        assert page.input_value("#instruction") == "Copy it."
    finally:
        page.close()


def test_page_shows_the_problems_an_answer_kept_each_linked_to_its_line(browser):
    """Checked as Python, the answer announces a repair pass ("repairing"), then keeps a problem on its second
    line: listed beside the output, a click lights up that line. Unchecked, the page says so."""
    from playwright.sync_api import expect

    document = "def add(a, b):\n    return plus(a, b)\n"
    problem = Problem("undefined name `plus`", 26, 30, "F821", "ruff")
    fixed = Repair(1, (problem, problem), (problem,), True, NOTHING, 0.01, model=False)
    fake = FakeAssistant(chars=5, step_seconds=0.0, problems=(problem,), repairs=(fixed,))
    with serve(create_app(lambda: fake, "fake")) as address:
        page = browser.new_page()
        try:
            page.goto(f"http://{address}/")
            expect(page.locator("#run")).to_be_enabled(timeout=60_000)
            page.fill("#document", document)
            page.fill("#instruction", "Copy it.")
            page.select_option("#language", "python")
            page.click("#run")
            expect(page.locator("#checks-summary")).to_contain_text("repairing", timeout=60_000)
            fake.repaired.set()
            expect(page.locator("#status")).to_contain_text("Done", timeout=60_000)
            expect(page.locator("#checks-summary")).to_have_text("checked (fake), fixed without a model: 1 problem left")
            listed = page.locator("#problems button")
            expect(listed).to_have_count(1)
            expect(listed).to_have_text("line 2: undefined name `plus` [F821]")
            listed.click()
            lit = page.locator("#output .problem-line")
            expect(lit.first).to_be_visible()
            assert "".join(lit.all_text_contents()) == "    return plus(a, b)\n"
            assert "".join(page.locator("#output span").all_text_contents()) == document

            page.select_option("#language", "")
            page.click("#run")
            expect(page.locator("#status")).to_contain_text("Done", timeout=60_000)
            expect(page.locator("#checks-summary")).to_have_text("unchecked: prose or an unknown language")
            expect(page.locator("#problems button")).to_have_count(0)
        finally:
            page.close()
