"""The chat page in headless Chromium (Debian's chromium + chromium-driver via
selenium): it loads, sends a message, renders a streamed answer, and the engine
panel updates. Saves a screenshot to build/screenshots/chat.png
(OMNIBUS_UPDATE_SCREENSHOT=1: to docs/screenshots/chat.png, the README's)."""
import os
import pathlib
import shutil

import pytest

from conftest import ROOT

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser():
    if not CHROMIUM or not DRIVER:
        pytest.skip("chromium and chromium-driver (Debian packages) are not installed")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1200,800"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


def test_chat_page_streams_an_answer(server, browser):
    browser.get(server.base_url + "/")
    wait = WebDriverWait(browser, 60)
    assert browser.title == "omnibus chat"
    # The state panel fills in from /v1/engine/state.
    wait.until(lambda d: d.find_element(By.ID, "health").text == "ready")
    wait.until(lambda d: d.find_element(By.ID, "state-kv").text != "–")
    steps_before = int(browser.find_element(By.ID, "state-steps").text)
    assert browser.find_element(By.ID, "model-name").text == "smollm2-135m"

    browser.find_element(By.ID, "temperature").clear()
    browser.find_element(By.ID, "temperature").send_keys("0")
    browser.find_element(By.ID, "max_tokens").clear()
    browser.find_element(By.ID, "max_tokens").send_keys("48")
    browser.find_element(By.ID, "prompt").send_keys("What is the capital of France?")
    browser.find_element(By.ID, "send").click()

    # Streaming: the Stop button is live and text appears before the answer is done.
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant"))
    wait.until(lambda d: not d.find_element(By.ID, "stop").get_attribute("disabled")
               or d.find_elements(By.CSS_SELECTOR, ".msg.assistant.done"))
    answer = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant.done"))
    text = answer.find_element(By.CSS_SELECTOR, ".text").text
    assert text.strip(), "empty answer"
    assert "Error" not in text
    assert answer.get_attribute("data-finish") in ("stop", "length")
    assert "tokens" in answer.find_element(By.CSS_SELECTOR, ".meta").text
    assert browser.find_element(By.CSS_SELECTOR, ".msg.user").text == "What is the capital of France?"
    # The engine panel moved on.
    wait.until(lambda d: int(d.find_element(By.ID, "state-steps").text) > steps_before)

    # Tests must not dirty the checkout; refreshing the committed picture is opt-in.
    update = os.environ.get("OMNIBUS_UPDATE_SCREENSHOT") == "1"
    out = ROOT / ("docs" if update else "build") / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(out / "chat.png"))
    assert (out / "chat.png").stat().st_size > 10000


def test_stop_button_aborts_the_stream(server, browser):
    browser.get(server.base_url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: d.find_element(By.ID, "health").text == "ready")
    browser.find_element(By.ID, "max_tokens").clear()
    browser.find_element(By.ID, "max_tokens").send_keys("1500")
    browser.find_element(By.ID, "prompt").send_keys("Write a very long essay about the sea.")
    browser.find_element(By.ID, "send").click()
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant .text").text.strip())
    browser.find_element(By.ID, "stop").click()
    answer = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant.done"))
    assert answer.get_attribute("data-finish") in ("stopped", "stop")
    server.wait_idle(timeout=30)
