"""A headless Chromium for page tests: Playwright driving the binary of the `@sparticuz/chromium` npm
package. `chromium_path()` returns the executable or None with the reason; nothing is downloaded
here (the test setup, .ci/run, installs the packages: `pip install playwright` and
`npm install @sparticuz/chromium` into MSTRAIN_CHROMIUM_DIR or /tmp/mstrain-chromium)."""
import os
import shutil
import subprocess

LAUNCH_ARGS = ["--no-sandbox", "--single-process", "--no-zygote"]
_SCRIPT = ("const c=require('@sparticuz/chromium');(c.default||c).executablePath()"
           ".then(p=>console.log(p)).catch(e=>{console.error(String(e));process.exit(1)})")


def chromium_path():
    """(path, None) of a Chromium executable, or (None, one-line reason)."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        return None, "playwright is not installed (pip install playwright)"
    folder = os.environ.get("MSTRAIN_CHROMIUM_DIR", "/tmp/mstrain-chromium")
    candidates = [folder]
    node = shutil.which("node")
    if node is None:
        return None, "node is not installed (needed to unpack @sparticuz/chromium)"
    for root in candidates:
        if os.path.isdir(os.path.join(root, "node_modules", "@sparticuz", "chromium")):
            try:
                out = subprocess.run([node, "-e", _SCRIPT], cwd=root, capture_output=True, text=True, timeout=120)
            except subprocess.TimeoutExpired:
                return None, "unpacking @sparticuz/chromium timed out"
            path = out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else ""
            if path and os.path.exists(path):
                return path, None
            return None, f"@sparticuz/chromium did not unpack: {out.stderr.strip()[-200:]}"
    return None, f"@sparticuz/chromium is not installed (npm install @sparticuz/chromium in {folder})"
