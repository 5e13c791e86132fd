"""The page in a real headless browser (Debian's chromium and chromedriver, driven by selenium):
it loads, a typed sentence gets its translation and n-best list, the heatmap renders."""

import os
import pathlib
import shutil

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import extras as extras_lib
from processes import LINES
from fake_engine import WAIT

# The screenshot the test leaves for a person to look at (T2T_JAX_SCREENSHOTS: another folder).
SCREENSHOTS = pathlib.Path(os.environ.get("T2T_JAX_SCREENSHOTS", "/tmp/t2t_jax-screenshots"))


@pytest.fixture
def browser():
  driver_path = shutil.which("chromedriver")
  binary = shutil.which("chromium")
  if driver_path is None or binary is None:
    pytest.skip(extras_lib.install_reason("Debian's chromium and chromedriver",
                                          "apt-get install -y chromium chromium-driver"))
  options = webdriver.ChromeOptions()
  options.binary_location = binary
  for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
               "--window-size=1200,1000"):
    options.add_argument(flag)
  # The driver named by path: selenium then downloads nothing.
  driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver_path))
  yield driver
  driver.quit()


def test_a_typed_sentence_gets_its_translation_and_its_attention_heatmap(jax_server, browser):
  host, port = jax_server.address
  browser.get(f"http://{host}:{port}/")
  wait = WebDriverWait(browser, WAIT)
  wait.until(lambda b: "decoder layers" in b.find_element(By.ID, "model").text)
  browser.find_element(By.ID, "source").send_keys(LINES[1])
  browser.find_element(By.ID, "translate").click()
  wait.until(lambda b: b.find_element(By.ID, "heatmap").get_attribute("data-rows")
             or b.find_element(By.ID, "error").text)
  assert browser.find_element(By.ID, "error").text == ""
  best = browser.find_element(By.CSS_SELECTOR, "#results .best").text
  nbest = browser.find_elements(By.CSS_SELECTOR, "#results .nbest li")
  assert best and len(nbest) == 1 and nbest[0].text == best
  canvas = browser.find_element(By.ID, "heatmap")
  assert int(canvas.get_attribute("data-rows")) >= 2 and int(canvas.get_attribute("data-cols")) >= 2
  # The canvas holds the heatmap's colours, not a blank image.
  blue = browser.execute_script(
      "const c = document.getElementById('heatmap'), d = c.getContext('2d')"
      ".getImageData(0, 0, c.width, c.height).data; let n = 0;"
      "for (let i = 0; i < d.length; i += 4) if (d[i + 2] === 255 && d[i] < 250) n++; return n;")
  assert blue > 100
  SCREENSHOTS.mkdir(parents=True, exist_ok=True)
  assert browser.save_screenshot(str(SCREENSHOTS / "serve_page.png"))
