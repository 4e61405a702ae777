"""Check the installer files as far as a Linux machine can: syntax, and that every path they name exists.

    python installers/check_installers.py [--built]

- .github/workflows/installers.yml parses as YAML, has the three jobs, and every installers/ path it
  runs exists;
- the three build scripts pass `bash -n` (Linux, macOS); build.ps1 parses with tree-sitter's
  PowerShell grammar when `node` and the npm packages tree-sitter + tree-sitter-powershell are
  installed (see installers/README.md), else it says it skipped that;
- every file installers/draftlight.spec and installers/windows/draftlight.iss name exists (with
  --built, also the bundle folder dist/Draftlight the .iss packs);
- the .desktop file passes desktop-file-validate when that tool is installed.
Prints one line per check; exits 1 when any failed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INST = ROOT / "installers"
WORKFLOW = ROOT / ".github" / "workflows" / "installers.yml"
SCRIPTS = [INST / "linux" / "build.sh", INST / "linux" / "install.sh", INST / "macos" / "build.sh"]
PS1 = INST / "windows" / "build.ps1"
ISS = INST / "windows" / "draftlight.iss"
SPEC = INST / "draftlight.spec"
DESKTOP = INST / "linux" / "draftlight.desktop"

problems: list[str] = []


def ok(what: str) -> None:
    print(f"ok    {what}")


def bad(what: str) -> None:
    print(f"FAIL  {what}")
    problems.append(what)


def skip(what: str) -> None:
    print(f"skip  {what}")


def check_workflow() -> None:
    import yaml

    try:
        doc = yaml.safe_load(WORKFLOW.read_text())
    except yaml.YAMLError as exc:
        return bad(f"{WORKFLOW.relative_to(ROOT)}: not valid YAML: {exc}")
    # YAML 1.1 reads the key `on` as True.
    triggers = doc.get("on", doc.get(True))
    jobs = doc.get("jobs", {})
    if not triggers or not jobs:
        return bad(f"{WORKFLOW.relative_to(ROOT)}: no triggers or no jobs")
    matrix = jobs["build"]["strategy"]["matrix"]["include"]
    oses = sorted(m["os"] for m in matrix)
    ok(f"{WORKFLOW.relative_to(ROOT)} is valid YAML: jobs on {', '.join(oses)}")
    for entry in matrix:
        for rel in re.findall(r"installers/[\w./-]+", entry["build"]):
            (ok if (ROOT / rel).is_file() else bad)(f"workflow {entry['name']} runs {rel}")
        if not entry["artifact"].startswith("dist/"):
            bad(f"workflow {entry['name']}: artifact {entry['artifact']} is not under dist/")
    for step in jobs["build"]["steps"]:
        uses = step.get("uses", "")
        if uses and not re.fullmatch(r"[\w-]+/[\w-]+@v\d+", uses):
            bad(f"workflow step uses {uses!r}: not a pinned major version")


def check_shell() -> None:
    for script in SCRIPTS:
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        (ok if proc.returncode == 0 else bad)(f"bash -n {script.relative_to(ROOT)} {proc.stderr.strip()}".rstrip())


def check_script_paths() -> None:
    """Every repository file a build script copies or runs exists (on every platform, / or \\)."""
    for script in [*SCRIPTS, PS1]:
        text = script.read_text()
        for ref in dict.fromkeys(re.findall(r"(?:installers|resources)[/\\][\w./\\-]+", text)):
            rel = ref.replace("\\", "/").rstrip(".")
            if "*" in rel or "$" in rel:
                continue
            (ok if (ROOT / rel).exists() else bad)(f"{script.relative_to(ROOT)} names {rel}")


def check_powershell() -> None:
    checker = INST / "windows" / "ps1_syntax.mjs"
    modules = os.environ.get("DRAFTLIGHT_TS_MODULES")  # a folder holding node_modules/tree-sitter*
    node = shutil.which("node")
    if not (node and modules and (Path(modules) / "node_modules" / "tree-sitter-powershell").is_dir()):
        return skip(f"{PS1.relative_to(ROOT)}: PowerShell syntax (set DRAFTLIGHT_TS_MODULES to a folder with "
                    "`npm install tree-sitter tree-sitter-powershell`; no pwsh on this machine)")
    env = {**os.environ, "NODE_PATH": str(Path(modules) / "node_modules")}
    # ES modules ignore NODE_PATH: run the checker from the modules folder.
    target = Path(modules) / checker.name
    shutil.copy(checker, target)
    proc = subprocess.run([node, str(target), str(PS1)], capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    (ok if proc.returncode == 0 else bad)(f"tree-sitter-powershell: {' / '.join(lines) or proc.stderr.strip()}")


def check_spec() -> None:
    text = SPEC.read_text()
    # Paths the spec builds from ROOT: ROOT / "a" / "b" ...
    for parts in dict.fromkeys(re.findall(r'ROOT((?:\s*/\s*"[^"]+")+)', text)):
        rel = Path(*re.findall(r'"([^"]+)"', parts))
        (ok if (ROOT / rel).exists() else bad)(f"spec names {rel}")
    for icon in dict.fromkeys(re.findall(r'"(draftlight\.(?:ico|icns))"', text)):
        (ok if (INST / "icons" / icon).is_file() else bad)(f"spec names icons/{icon}")
    (ok if (ROOT / "resources" / "test-models" / "tiny-target.gguf").is_file() else bad)(
        "resources/test-models has the self-test models")


def check_iss(built: bool) -> None:
    text = ISS.read_text()
    base = ISS.parent
    refs = re.findall(r'^Source:\s*"([^"]+)"', text, re.M) + re.findall(r"^SetupIconFile=(.+)$", text, re.M)
    for ref in refs:
        rel = ref.strip().replace("\\", "/")
        path = (base / rel.rstrip("*").rstrip("/")).resolve()
        if "dist/" in rel and not built:
            skip(f"draftlight.iss packs {ref} (exists after a build; run with --built)")
            continue
        (ok if path.exists() else bad)(f"draftlight.iss names {ref} -> {path.relative_to(ROOT)}")
    exes = re.findall(r'Filename:\s*"\{app\}\\([^"]+)"', text) + re.findall(r"UninstallDisplayIcon=\{app\}\\(.+)$", text, re.M)
    for exe in dict.fromkeys(exes):
        spec = SPEC.read_text()
        (ok if f'exe("{Path(exe).stem}"' in spec else bad)(f"draftlight.iss starts {exe}: the spec builds it on Windows")


def check_desktop() -> None:
    tool = shutil.which("desktop-file-validate")
    if not tool:
        return skip("desktop-file-validate not installed (apt-get install desktop-file-utils)")
    # The template holds @EXEC@; validate what install.sh writes.
    filled = Path(os.environ.get("TMPDIR", "/tmp")) / "draftlight-check.desktop"
    filled.write_text(DESKTOP.read_text().replace("@EXEC@", "/opt/draftlight/draftlight"))
    proc = subprocess.run([tool, str(filled)], capture_output=True, text=True)
    out = (proc.stdout + proc.stderr).strip()
    (ok if proc.returncode == 0 and "error" not in out.lower() else bad)(f"desktop-file-validate {DESKTOP.name} {out}".rstrip())


def main() -> int:
    built = "--built" in sys.argv
    check_workflow()
    check_shell()
    check_script_paths()
    check_powershell()
    check_spec()
    check_iss(built)
    check_desktop()
    print(f"{len(problems)} problem(s)" if problems else "installer files check out")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
