"""A report page as a person sees it: rendered by headless Chromium to a PNG.

    python -m foxwindow.report.screenshot REPORT/index.html shot.png [--size 1400,2000] [--force]

Chromium is the Debian package (`apt-get install chromium`, /usr/bin/chromium; also found as chromium-browser
or google-chrome on the PATH, or named by $CHROMIUM). It runs with a fresh profile folder, no network
services (no sync, updates, QUIC or background fetches) and no sandbox (it runs as root in containers);
the page itself fetches nothing, so the picture is what a reader's browser shows offline.
"""
import os
import shutil
import subprocess
import sys
import tempfile

from foxwindow import outputs

__all__ = ["NAMES", "FLAGS", "find_browser", "screenshot", "main"]

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--allow-file-access-from-files")


def find_browser():
    """The Chromium executable, or None: $CHROMIUM, then the usual names on the PATH."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for n in NAMES:
        p = shutil.which(n)
        if p:
            return p
    return None


def screenshot(page, png, size=(1400, 2000), browser=None, timeout=120):
    """Render the local HTML file `page` to `png` (width, height in CSS pixels). Returns png. RuntimeError
    with Chromium's last lines when it writes no picture; FileNotFoundError when no browser is found."""
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError("no Chromium found (apt-get install chromium, or set $CHROMIUM)")
    page = os.path.abspath(page)
    if not os.path.isfile(page):
        raise FileNotFoundError(f"{page} not found")
    png = os.path.abspath(png)
    with tempfile.TemporaryDirectory(prefix="foxwindow-chromium-") as profile:
        shot = os.path.join(profile, "shot.png")
        cmd = [browser, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
               f"--window-size={int(size[0])},{int(size[1])}", "file://" + page]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if not os.path.isfile(shot) or os.path.getsize(shot) == 0:
            tail = " | ".join((r.stderr or r.stdout or "").strip().splitlines()[-3:])
            raise RuntimeError(f"Chromium wrote no screenshot (exit {r.returncode}): {tail}")
        with open(shot, "rb") as fh:
            outputs.write_bytes(png, fh.read())
    return png


def main(argv=None):
    p = outputs.parser("render a report page with headless Chromium to a PNG screenshot")
    p.add_argument("page", help="the HTML page (a report's index.html or layer-NN.html)")
    p.add_argument("png", help="the screenshot to write")
    p.add_argument("--size", default="1400,2000", help="window width,height in CSS pixels")
    outputs.add_common(p)
    a = p.parse_args(argv)
    try:
        size = tuple(int(v) for v in a.size.split(","))
        assert len(size) == 2 and min(size) >= 100
    except (ValueError, AssertionError):
        raise outputs.UsageError(f"--size: expected WIDTH,HEIGHT (each >= 100); got {a.size!r}") from None
    page = outputs.input_file("PAGE", a.page)
    png = outputs.check_writable(a.png, force=a.force, what="PNG")
    if find_browser() is None:
        raise outputs.MissingPiece("no Chromium found: apt-get install chromium (or set $CHROMIUM to its path)")
    screenshot(page, png, size)
    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(outputs.cli(main))
