"""A real browser for the tests that need one: Debian's headless Chromium driven by selenium through Debian's
chromedriver (no browser download). Outside CI a test skips, naming what to install; under CI (CI set) it fails,
since .ci/run installs both."""
import os
import shutil

import pytest

CHROMIUM = ("chromium", "chromium-browser")
DRIVER = "chromedriver"


def chromium():
    """A headless Chromium under selenium, logging the console; skips (or fails under CI) where none can be had."""
    binary = next(filter(None, (shutil.which(name) for name in CHROMIUM)), None)
    driver = shutil.which(DRIVER)
    missing = [what for what, found in (("Debian's chromium", binary), ("chromium-driver", driver)) if not found]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium (pip install -e '.[docs]')")
    if missing:
        message = f"no browser to test in: install {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    options = Options()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def console_errors(driver):
    """The browser console's errors since the last call."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def requested_urls(driver):
    """Every URL the page asked the network for since the last call, from Chromium's performance log."""
    import json
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls
