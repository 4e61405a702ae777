"""`draftlight --self-test`: prove an installation works, offscreen, in a second or two.

It loads the tiny test models shipped in resources/test-models, generates a short speculative reply,
checks that it equals plain decoding token for token, checks that Qt starts (offscreen unless a
platform is already chosen) and that the app's modules import, prints the llama.cpp build, and ends
with one verdict line. Exit status 0 = passed, 1 = failed; never a traceback.

DRAFTLIGHT_SELFTEST_MODELS points it at another folder holding tiny-target.gguf and
tiny-drafter.gguf (used by the tests to prove that a damaged model is reported).
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine import paths
PROMPT = "the model is fast"  # 32 tokens, some drafts accepted and some corrected
MAX_TOKENS = 32
DRAFT_MAX = 4
TARGET_FILE = "tiny-target.gguf"
DRAFTER_FILE = "tiny-drafter.gguf"
PASSED = "self-test passed"
FAILED = "self-test FAILED"


class SelfTestFailure(Exception):
    """A check failed; the message says which and what to do."""


def _say(label: str, text: str) -> None:
    print(f"  {label + ':':<12} {text}", flush=True)


def _where() -> str:
    if paths.installed_app():
        return f"installed bundle at {Path(sys.executable).resolve().parent}"
    return f"source checkout (Python {sys.version.split()[0]})"


def _models_dir() -> Path:
    override = os.environ.get("DRAFTLIGHT_SELFTEST_MODELS")
    return Path(override) if override else paths.resources_dir() / "test-models"


def _compact_system_info(info: str) -> str:
    """'CPU : SSE3 = 1 | AVX = 1 | ...' -> 'CPU: SSE3 AVX ...' (only the features that are on)."""
    out = []
    for part in info.split("|"):
        part = part.strip()
        if " : " in part:  # a new backend section starts, e.g. 'CPU : SSE3 = 1'
            name, part = part.split(" : ", 1)
            out.append(f"{name.strip()}:")
        key, _, value = part.partition(" = ")
        if value.strip() == "1":
            out.append(key.strip())
        elif value.strip() and value.strip() != "0":
            out.append(f"{key.strip()}={value.strip()}")
    return " ".join(out)


def check_backend() -> str:
    from engine.llama import backend as llama_backend
    names = llama_backend.backends()
    if not names:
        raise SelfTestFailure("llama.cpp loaded no compute backend (not even the CPU one): the installation is incomplete")
    devices = ", ".join(f"{d.name} ({d.description})" for d in llama_backend.devices()) or "none"
    _say("llama.cpp", f"backends {', '.join(names)}; devices {devices}")
    _say("build", _compact_system_info(llama_backend.system_info()))
    return names[0] if len(names) == 1 else "+".join(names)


def _tokens(events: list) -> list[int]:
    from engine.decoding.events import TokenEvent

    return [e.token_id for e in events if isinstance(e, TokenEvent)]


def _done(events: list):
    from engine.decoding.events import DoneEvent

    done = [e for e in events if isinstance(e, DoneEvent)]
    if not done:
        raise SelfTestFailure("the reply ended without a final event")
    return done[-1]


def _is_numerical_tie(session, prompt_tokens: list[int], prefix: list[int], a: int, b: int) -> float | None:
    """The logit gap between two candidates when it is a near-exact tie (batched and single-token
    passes may round differently there), else None."""
    from engine.llama.types import Logits

    model = session.target
    model.clear()
    row = model.decode(list(prompt_tokens) + list(prefix), Logits.LAST)[0].astype("float64")
    model.clear()
    gap = abs(float(row[a] - row[b]))
    return gap if gap <= 1e-4 * max(1.0, float(abs(row).max())) else None


def check_speculation() -> str:
    from engine.llama.types import LoadSettings
    from engine.drafting.draft_choice import DraftLength
    from engine.decoding.session import GenerationSettings, Session

    folder = _models_dir()
    target, drafter = folder / TARGET_FILE, folder / DRAFTER_FILE
    for f in (target, drafter):
        if not f.is_file():
            raise SelfTestFailure(f"test model {f} is missing: the installation is incomplete, reinstall Draftlight")
    _say("models", f"{target.name} ({target.stat().st_size / 1e6:.1f} MB), {drafter.name} "
                   f"({drafter.stat().st_size / 1e6:.1f} MB) in {folder}")
    load = LoadSettings(n_ctx=512)
    messages = [{"role": "user", "content": PROMPT}]
    greedy = dict(max_tokens=MAX_TOKENS)  # GenerationSettings' default sampling is greedy (temperature 0)
    spec = Session(target, str(drafter), target_load=load, calibrate=False)
    try:
        plain = Session(target, None, target_load=load, calibrate=False)
        try:
            t = time.perf_counter()
            spec_events = list(spec.chat(messages, GenerationSettings(draft_max=DraftLength.fixed(DRAFT_MAX), **greedy)))
            spec_s = time.perf_counter() - t
            plain_events = list(plain.chat(messages, GenerationSettings(draft_max=DraftLength.fixed(0), **greedy)))
            got, want = _tokens(spec_events), _tokens(plain_events)
            stats = _done(spec_events).stats
            if stats.drafted == 0:
                raise SelfTestFailure("the drafter proposed no tokens: speculative decoding did not run")
            _say("speculative", f"{len(got)} tokens in {stats.rounds} rounds ({spec_s * 1000:.0f} ms), "
                                f"drafted {stats.drafted}, accepted {stats.accepted} "
                                f"(acceptance {stats.acceptance_rate:.0%})")
            if got == want:
                _say("plain", f"{len(want)} tokens, identical to the speculative reply token for token")
            else:
                i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                if i >= min(len(got), len(want)):
                    raise SelfTestFailure(f"speculative reply has {len(got)} tokens, plain decoding {len(want)}")
                prompt_tokens = plain.render(messages).tokens
                gap = _is_numerical_tie(plain, prompt_tokens, want[:i], got[i], want[i])
                if gap is None:
                    raise SelfTestFailure(
                        f"speculative decoding differs from plain decoding at token {i} "
                        f"({got[i]} vs {want[i]}): this llama.cpp build computes wrong results"
                    )
                _say("plain", f"same up to token {i}, where the target's top two choices tie "
                              f"(logit gap {gap:.1e}): identical within rounding")
            return f"acceptance {stats.acceptance_rate:.0%}"
        finally:
            plain.close()
    finally:
        spec.close()


def _platform_plugin_present(name: str, folders: list[Path]) -> bool:
    # libqxcb.so (Linux), libqcocoa.dylib (macOS), qwindows.dll (Windows)
    stems = {f"libq{name}", f"q{name}"}
    return any(p.name.split(".")[0] in stems for f in folders if f.is_dir() for p in f.iterdir())


def check_qt() -> str:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    platform = os.environ["QT_QPA_PLATFORM"].split(":")[0].split(";")[0]
    from PySide6.QtCore import QLibraryInfo, qVersion

    folders = [Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms"]
    for var in ("QT_QPA_PLATFORM_PLUGIN_PATH",):
        if os.environ.get(var):
            folders.append(Path(os.environ[var]))
    for var in ("QT_PLUGIN_PATH",):
        folders += [Path(p) / "platforms" for p in os.environ.get(var, "").split(os.pathsep) if p]
    # Qt aborts the process when the platform plugin is missing: look first, so a broken bundle
    # gets a sentence instead of a core dump.
    if not _platform_plugin_present(platform, folders):
        raise SelfTestFailure(
            f"Qt platform plugin '{platform}' is not in this installation (looked in "
            f"{', '.join(str(f) for f in folders)}): the bundle is incomplete, reinstall Draftlight"
        )
    desktop = {"linux": "xcb", "darwin": "cocoa", "win32": "windows"}.get(sys.platform)
    if desktop and not _platform_plugin_present(desktop, folders):
        raise SelfTestFailure(
            f"Qt's desktop platform plugin '{desktop}' is missing: the window could not open; reinstall Draftlight"
        )
    from PySide6.QtCore import QPoint, Qt
    from PySide6.QtGui import QColor, QImage, QPainter
    from PySide6.QtWidgets import QApplication

    from app.qt_check import emit_bug

    problem = emit_bug()
    if problem:
        raise SelfTestFailure(problem)
    app = QApplication.instance() or QApplication([sys.argv[0]])
    image = QImage(96, 24, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    painter.setPen(Qt.GlobalColor.black)
    painter.drawText(QPoint(2, 18), "Draftlight")
    painter.end()
    inked = any(image.pixelColor(x, y) != QColor("white") for x in range(96) for y in range(24))
    if not inked:
        raise SelfTestFailure("Qt started but drew no text: no usable font in this installation")
    icon = paths.resources_dir() / "icons" / "draftlight.svg"
    if icon.is_file() and QImage(str(icon)).isNull():
        raise SelfTestFailure(f"Qt cannot read the app's SVG icon {icon}: the image format plugins are missing")
    _say("Qt", f"Qt {qVersion()} started on the '{app.platformName()}' platform, drew text, read the SVG icon"
               f"{f'; {desktop} plugin present' if desktop else ''}")
    return app.platformName()


def check_app_imports() -> str:
    # A bundle that lost a module fails here, not when the user opens a dialog.
    import importlib

    names = ["app.window", "engine.models.download", "huggingface_hub", "jinja2"]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise SelfTestFailure(f"module {name} cannot be imported ({exc}): the installation is incomplete") from None
    _say("app", f"modules import: {', '.join(names)}")
    return "ok"


def run(argv: list[str] | None = None) -> int:
    """Run every check; print one verdict line; 0 when all passed, 1 otherwise."""
    start = time.perf_counter()
    print("Draftlight self-test", flush=True)
    _say("running", _where())
    _say("resources", str(paths.resources_dir()))
    checks: list[tuple[str, Callable[[], str]]] = [
        ("llama.cpp backend", check_backend),
        ("speculative decoding", check_speculation),
        ("Qt", check_qt),
        ("app modules", check_app_imports),
    ]
    results: dict[str, str] = {}
    for label, check in checks:
        try:
            results[label] = check()
        except SelfTestFailure as exc:
            return _fail(label, str(exc))
        except Exception as exc:  # noqa: BLE001 - the self-test reports, it never shows a traceback
            if os.environ.get("DRAFTLIGHT_SELFTEST_TRACE"):
                import traceback

                traceback.print_exc()
            message = str(exc) or type(exc).__name__
            if not _is_engine_error(exc):
                message = f"{type(exc).__name__}: {message}"
            return _fail(label, message)
    elapsed = time.perf_counter() - start
    print(f"{PASSED}: {results['llama.cpp backend']} backend, speculative reply identical to plain decoding "
          f"({results['speculative decoding']}), Qt ok ({elapsed:.1f} s)", flush=True)
    return 0


def _is_engine_error(exc: Exception) -> bool:
    try:
        from engine.errors import EngineError
    except Exception:  # noqa: BLE001 - the engine itself is what broke
        return False
    return isinstance(exc, EngineError)


def _fail(label: str, message: str) -> int:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) > 1:  # e.g. numpy's import advice: show it, and let the verdict carry its last line
        print("\n".join(f"  | {line}" for line in lines), flush=True)
    print(f"{FAILED}: {label}: {lines[-1] if lines else message}", flush=True)
    return 1
