"""Screenshots of the docs site, to look at (not run by CI or the tests).

Builds the site strictly and opens its index and two API pages (`eqxrl.agents`, `eqxrl.core`)
in headless Chromium from the OS packages (`apt-get install chromium`), saving one PNG per page:

    python docs/screenshots.py [OUT_DIR]     # default: docs-screenshots/ (then delete it)
"""

import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# (Headless Chromium saves a blank page for a URL with a #fragment: whole pages only.)
PAGES = {"index": "index.html", "api-agents": "api/agents/index.html", "api-core": "api/core/index.html"}
WINDOW = "1280,1600"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    sys.exit("no Chromium on PATH: apt-get install chromium")


def main(out: pathlib.Path) -> None:
    browser = chromium()
    site = out / "site"
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)], cwd=ROOT, check=True)
    for name, page in PAGES.items():
        png = out / f"{name}.png"
        url = (site / page).as_uri()
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000",
             f"--window-size={WINDOW}", f"--screenshot={png}", url],
            check=True, capture_output=True, timeout=120,
        )
        print(png)


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs-screenshots").resolve())
