"""The rooms of engine/ and app/ and which rooms import which, read from the code (not from a drawing).

    python scripts/rooms.py            # a Mermaid graph (GitHub renders it) and a text list, to stdout
    python scripts/rooms.py --check    # exit 1 if docs/development.md's copy differs from the code's
    python scripts/rooms.py --write    # put the code's into docs/development.md

A room is a subpackage (engine/llama, app/chat, ...) or a top-level module (engine/sampling.py). An edge
A --> B: some module of room A imports a module of room B (at any level of the file, lazily or not). The
pictures show each package's rooms among themselves; the table has every room's imports, app -> engine too.
docs/development.md holds the output between the markers below; --check keeps it current.
"""
from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "app")
DOC = ROOT / "docs" / "development.md"
BEGIN, END = "<!-- rooms: begin (python scripts/rooms.py) -->", "<!-- rooms: end -->"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_of(module: str) -> str | None:
    """engine.drafting.policy -> engine.drafting; engine.sampling -> engine.sampling; engine -> None."""
    parts = module.split(".")
    if parts[0] not in PACKAGES or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def imported(path: Path, module: str) -> set[str]:
    """Every module of ours that the file imports, absolute or relative, at any depth of the file."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from engine.drafting import policy`
    return {m for m in out if m.split(".")[0] in PACKAGES}


def graph() -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """Rooms with their modules' file names, and each room's set of rooms it imports."""
    rooms: dict[str, list[str]] = defaultdict(list)
    edges: dict[str, set[str]] = defaultdict(set)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = module_name(path)
            room = room_of(module)
            if room is None:
                continue
            rooms[room].append(path.relative_to(ROOT / Path(*room.split("."))).as_posix()
                               if (ROOT / Path(*room.split("."))).is_dir() else path.name)
            for target in imported(path, module):
                other = room_of(target)
                if other and other != room:
                    edges[room].add(other)
    return dict(rooms), {k: v for k, v in edges.items() if v}


#: Modules every room may use (errors, paths) and entry points: in the table, left out of the pictures.
SHARED = {"engine.errors", "engine.paths", "engine.__main__", "app.__main__"}


def node(room: str) -> str:
    return room.replace(".", "_")


def render() -> str:
    """Per package, a Mermaid picture of its rooms and which import which; then one table of every room."""
    rooms, edges = graph()
    lines = []
    for package in PACKAGES:
        mine = sorted(r for r in rooms if r.startswith(package + ".") and r not in SHARED)
        lines += [f"`{package}/`, inside:", "", "```mermaid", "flowchart TD"]
        lines += [f"  {node(r)}[\"{r.split('.', 1)[1]}\"]" for r in mine]
        lines += [f"  {node(r)} --> {node(o)}" for r in mine for o in sorted(edges.get(r, set())) if o in mine]
        lines += ["```", ""]
    lines += ["| room | modules | imports from |", "|---|---|---|"]
    for room in sorted(rooms):
        mods = ", ".join(m.removesuffix(".py") for m in sorted(rooms[room]) if m != "__init__.py")
        uses = ", ".join(o.split(".", 1)[1] if o.split(".")[0] == room.split(".")[0] else o
                         for o in sorted(edges.get(room, set()))) or "-"
        lines.append(f"| `{room.replace('.', '/')}` | {mods} | {uses} |")
    return "\n".join(lines)


def documented() -> str | None:
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help=f"compare with the copy in {DOC.relative_to(ROOT)}")
    ap.add_argument("--write", action="store_true", help=f"replace the copy in {DOC.relative_to(ROOT)}")
    args = ap.parse_args()
    now = render()
    if args.write:
        if documented() is None:
            print(f"{DOC.relative_to(ROOT)} has no rooms markers", file=sys.stderr)
            return 1
        head, rest = DOC.read_text(encoding="utf-8").split(BEGIN, 1)
        DOC.write_text(f"{head}{BEGIN}\n{now}\n{END}{rest.split(END, 1)[1]}", encoding="utf-8")
        print(f"wrote the rooms into {DOC.relative_to(ROOT)}")
        return 0
    if not args.check:
        print(now)
        return 0
    if documented() != now:
        print(f"{DOC.relative_to(ROOT)} is out of date: run `python scripts/rooms.py --write`", file=sys.stderr)
        return 1
    print(f"{DOC.relative_to(ROOT)}: the rooms are as the code has them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
