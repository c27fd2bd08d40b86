"""A class on one server: what a lecturer sets for the room, kept in one small JSON file in the run store's folder.

The teacher (the app's class page, behind EXPLORER_ADMIN_TOKEN) starts a class, sets the students' job limits
within the server's, pushes a Train-page link every page shows, reveals the design challenge's answer and exports
the class's runs; each student picks a display name and their challenge runs go to the class board.

    from explorer.classroom import Classroom, board, csv_text
    room = Classroom()                        # class.json in EXPLORER_HOME, beside runs.sqlite
    room.start(); room.push_design("0:4", "Try the papers' shortcut first")
    room.set_name("browser-1", "Ada"); room.post("browser-1", "job-1", "linear shortcuts #1", judged_row)
    board(room.read())                        # best first, `explorer.challenge.ranked`'s order

The file survives a server restart and is bounded: names, messages, links and reasons have a length cap, the
board a cap on students and on entries per student, and a file past FILE_BYTES is not read. Every write is a
read-modify-write under an exclusive lock (a thread lock and an flock, for several threads and processes) that
replaces the file atomically (a temporary file, then os.replace), so a reader sees the old file or the new one.
`read` parses the file again only when its inode, size or modification time changed, so a page can ask on every
run. Nothing here renders text: a page shows what a student typed escaped (the app's messages.escape), and
`csv_text` writes cells a spreadsheet will not run as formulas.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.registries import SpecError
from explorer.settings import home

FILE, LOCK = "class.json", "class.lock"
NAME_CHARS = 40  # a display name
MESSAGE_CHARS = 200  # the teacher's line beside a pushed link
LINK_CHARS = 2000  # a pushed link's query string
WHY_CHARS = 300  # why a run is not scored
OWNER_CHARS = 80  # a browser's (or session's) id
MAX_STUDENTS = 100  # names on the board
ENTRIES_PER_STUDENT = 20  # a student's runs on the board (the oldest unscored one leaves first)
FILE_BYTES = 2_000_000  # a larger class file is not read (the bounds above keep a real one under it)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a CSV cell starting so is a formula to a spreadsheet


@dataclass(frozen=True)
class Room:
    """The class's state as the file holds it. `open`: a class is running (names, board and the answer's reveal
    apply); `link`: the query string of a Train-page link pushed to every page ("" for none), `link_text` what it
    opens in words, `message` the teacher's line; `per_session`/`per_address`: the teacher's job limits (None:
    the server's); `names`: {owner: display name}; `entries`: the runs posted, oldest first; `damaged`: why the
    file could not be read (the class then reads as not running)."""

    open: bool = False
    started: float | None = None
    link: str = ""
    link_text: str = ""
    message: str = ""
    per_session: int | None = None
    per_address: int | None = None
    revealed: bool = False
    names: Mapping[str, str] = field(default_factory=dict)
    entries: tuple[Mapping[str, Any], ...] = ()
    damaged: str | None = None

    def link_params(self) -> dict[str, str]:
        """The pushed link's query parameters (what the Train page reads), {} for none."""
        return dict(urllib.parse.parse_qsl(self.link))

    def to_dict(self) -> dict[str, Any]:
        return {"open": self.open, "started": self.started, "link": self.link, "link_text": self.link_text,
                "message": self.message, "per_session": self.per_session, "per_address": self.per_address,
                "revealed": self.revealed, "names": dict(self.names), "entries": [dict(e) for e in self.entries]}


def _text(value: Any, path: str, limit: int, what: str) -> str:
    """`value` as one line of at most `limit` characters (control characters become spaces, ends trimmed); a
    SpecError naming `path` for longer text."""
    if not isinstance(value, str):
        raise SpecError(path, f"{what} is text, not {type(value).__name__}")
    line = " ".join("".join(" " if ord(c) < 32 or 127 <= ord(c) < 160 else c for c in value).split())
    if len(line) > limit:
        raise SpecError(path, f"{what} has {len(line)} characters; shorten it to at most {limit}")
    return line


def clean_name(name: Any) -> str:
    """A display name as the board keeps it: one line, at most NAME_CHARS characters, not empty."""
    line = _text(name, "name", NAME_CHARS, "a display name")
    if not line:
        raise SpecError("name", "a display name is empty; type the name the class board shows for you")
    return line


def _owner(owner: Any) -> str:
    if not isinstance(owner, str) or not owner or len(owner) > OWNER_CHARS:
        raise SpecError("owner", f"a student is named by a browser or session id of 1 to {OWNER_CHARS} characters")
    return owner


def _limit(value: Any, path: str, server: int | None, what: str, setting: str) -> int | None:
    """A teacher's job limit: None (the server's), or a whole number from 1 to the server's `setting`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(path, f"{what} is a whole number of at least 1, not {value!r}")
    if server is not None and value > server:
        raise SpecError(path, f"{what} is {value}, above this server's {server} ({setting}={server}); pick 1 to "
                              f"{server}, or restart the server with a higher {setting}")
    return value


def _from_dict(data: Any) -> Room:
    """A Room from the file's JSON, each field checked against its bounds; ValueError naming the first bad one."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    names = data.get("names") or {}
    entries = data.get("entries") or []
    if not isinstance(names, dict) or len(names) > MAX_STUDENTS:
        raise ValueError("names: not a map of at most MAX_STUDENTS names")
    if not isinstance(entries, list) or len(entries) > MAX_STUDENTS * ENTRIES_PER_STUDENT:
        raise ValueError("entries: not a list within the board's bounds")
    limits = [data.get(key) for key in ("per_session", "per_address")]
    if any(v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1) for v in limits):
        raise ValueError("per_session/per_address: not a whole number of at least 1")
    link = data.get("link") or ""
    if not isinstance(link, str) or len(link) > LINK_CHARS:
        raise ValueError("link: not text within LINK_CHARS")
    return Room(open=bool(data.get("open")), started=data.get("started"), link=link,
                link_text=_text(data.get("link_text") or "", "link_text", LINK_CHARS, "link_text"),
                message=_text(data.get("message") or "", "message", MESSAGE_CHARS, "message"),
                per_session=limits[0], per_address=limits[1], revealed=bool(data.get("revealed")),
                names={_owner(k): clean_name(v) for k, v in names.items()},
                entries=tuple(_entry(e) for e in entries))


def _entry(row: Any) -> dict[str, Any]:
    """A board entry with only its known fields, each of its type and within its bound."""
    if not isinstance(row, dict):
        raise ValueError("an entry is not a JSON object")
    steps, loss = row.get("steps"), row.get("final_loss")
    return {"owner": _owner(row.get("owner")), "job": _text(row.get("job") or "", "job", OWNER_CHARS, "job"),
            "label": _text(row.get("label") or "", "label", NAME_CHARS * 2, "label"),
            "design": None if row.get("design") is None else _text(row["design"], "design", 200, "design"),
            "shortcuts": int(row["shortcuts"]) if isinstance(row.get("shortcuts"), int) else None,
            "steps": steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
            "final_loss": float(loss) if isinstance(loss, (int, float)) and math.isfinite(loss) else None,
            "why": None if row.get("why") is None else _text(str(row["why"])[:WHY_CHARS], "why", WHY_CHARS, "why"),
            "at": float(row.get("at") or 0.0)}


_CACHE: dict[Path, tuple[tuple, Room]] = {}
_CACHE_LOCK = threading.Lock()
_WRITE_LOCKS: dict[Path, threading.Lock] = {}


class Classroom:
    """The class file `class.json` in `root` (default EXPLORER_HOME, the run store's folder)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root).expanduser() if root is not None else home()
        self.path = self.root / FILE

    # ---- reading -------------------------------------------------------------------------------------------
    def read(self) -> Room:
        """The class as the file holds it now (Room() when there is none); parsed again only when the file changed."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return Room()
        except OSError as error:
            return Room(damaged=f"the class file cannot be read ({error.strerror})")
        key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        with _CACHE_LOCK:
            cached = _CACHE.get(self.path)
        if cached is not None and cached[0] == key:
            return cached[1]
        room = self._parse()
        with _CACHE_LOCK:
            _CACHE[self.path] = (key, room)
        return room

    def _parse(self) -> Room:
        try:
            if self.path.stat().st_size > FILE_BYTES:
                return Room(damaged=f"the class file is larger than {FILE_BYTES:,} bytes; end the class to reset it")
            return _from_dict(json.loads(self.path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return Room()
        except (OSError, UnicodeDecodeError, ValueError, TypeError) as error:  # SpecError is a ValueError
            return Room(damaged=f"the class file is damaged ({str(error)[:120]}); end the class to reset it")

    # ---- writing -------------------------------------------------------------------------------------------
    def _update(self, change: Callable[[Room], Room | None]) -> Room:
        """Apply `change` to the current Room under the class's lock and replace the file atomically with its
        result (no write when it returns None). A damaged file reads as a new class."""
        import fcntl

        with _CACHE_LOCK:
            local = _WRITE_LOCKS.setdefault(self.path, threading.Lock())
        self.root.mkdir(parents=True, exist_ok=True)
        with local, open(self.root / LOCK, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # other processes serving the same store; released on close
            current = self._parse()
            if current.damaged:
                current = Room()
            changed = change(current)
            if changed is None:
                return current
            tmp = self.path.with_name(f".{FILE}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
            try:
                tmp.write_text(json.dumps(changed.to_dict(), ensure_ascii=False), encoding="utf-8")
                os.replace(tmp, self.path)
            finally:
                tmp.unlink(missing_ok=True)
            return changed

    def start(self) -> Room:
        """Start a class (a running one goes on as it is)."""
        return self._update(lambda room: None if room.open else Room(open=True, started=time.time()))

    def end(self) -> Room:
        """End the class: names, board, link, limits and reveal all go (export the CSV first)."""
        return self._update(lambda room: Room())

    def _running(self, room: Room) -> Room:
        if not room.open:
            raise SpecError("class", "no class is running; start one first")
        return room

    def set_limits(self, per_session: int | None, per_address: int | None, server_per_session: int | None,
                   server_per_address: int | None) -> Room:
        """The students' job limits: each browser (`per_session`) and each network address (`per_address`) may
        have at most that many jobs training or waiting. None: the server's own setting; a value above the
        server's (EXPLORER_MAX_JOBS_PER_SESSION, EXPLORER_MAX_JOBS_PER_ADDRESS) is refused: the server's caps are
        the ceiling."""
        session = _limit(per_session, "per_session", server_per_session, "each student's jobs at once",
                         "EXPLORER_MAX_JOBS_PER_SESSION")
        address = _limit(per_address, "per_address", server_per_address, "each network address's jobs at once",
                         "EXPLORER_MAX_JOBS_PER_ADDRESS")
        return self._update(lambda room: _replace(self._running(room), per_session=session, per_address=address))

    def push_preset(self, name: str, message: str = "") -> Room:
        """Push a link to the Train page set up with preset `name` (?preset=NAME)."""
        from explorer.registries import registry

        if not isinstance(name, str) or name not in registry("presets"):
            raise SpecError("preset", f"no preset named {str(name)[:80]!r}; pick one of `explorer presets`")
        return self._push(urllib.parse.urlencode({"preset": name}), f"the preset {name}", message)

    def push_design(self, design: str, message: str = "") -> Room:
        """Push a link to the Train page set up with the design challenge wired with `design` ("0:4")."""
        from explorer import challenge

        text = challenge.design_text(design)  # SpecError naming topology.shortcuts for a design the rules refuse
        return self._push(challenge.challenge_spec(text).to_query(), f"the challenge design {text}", message)

    def _push(self, query: str, what: str, message: str) -> Room:
        if len(query) > LINK_CHARS:
            raise SpecError("link", f"the link has {len(query)} characters, more than {LINK_CHARS}; push a preset")
        line = _text(message, "message", MESSAGE_CHARS, "the message")
        return self._update(lambda room: _replace(self._running(room), link=query, link_text=what, message=line))

    def clear_link(self) -> Room:
        return self._update(lambda room: _replace(room, link="", link_text="", message="") if room.link else None)

    def reveal(self, shown: bool = True) -> Room:
        """Show (or hide again) the design challenge's answer on the students' pages."""
        return self._update(lambda room: _replace(self._running(room), revealed=bool(shown)))

    def set_name(self, owner: str, name: str) -> Room:
        """`owner`'s display name on the board (a browser's id: all its tabs are one student)."""
        owner, line = _owner(owner), clean_name(name)

        def change(room: Room) -> Room | None:
            self._running(room)
            if room.names.get(owner) == line:
                return None
            if owner not in room.names and len(room.names) >= MAX_STUDENTS:
                raise SpecError("name", f"the class board is full ({MAX_STUDENTS} names); ask the teacher")
            return _replace(room, names={**room.names, owner: line})

        return self._update(change)

    def post(self, owner: str, job: str, label: str, judged: Mapping[str, Any]) -> Room:
        """Put `owner`'s ended run `job` on the board: `judged` is explorer.challenge.judge's row (an entry, or
        {"design", "why"} for a run it does not score). Only a student with a name posts; a job posts once; past
        ENTRIES_PER_STUDENT the student's oldest unscored entry (else their oldest) leaves."""
        row = _entry({"owner": owner, "job": str(job)[:OWNER_CHARS], "label": str(label)[:NAME_CHARS * 2],
                      **{k: judged.get(k) for k in ("design", "shortcuts", "steps", "final_loss", "why")},
                      "at": time.time()})

        def change(room: Room) -> Room | None:
            self._running(room)
            if owner not in room.names:
                raise SpecError("name", "choose a display name first: runs go to the class board under it")
            if any(e["owner"] == owner and e["job"] == row["job"] for e in room.entries):
                return None
            entries = [*room.entries, row]
            mine = [e for e in entries if e["owner"] == owner]
            if len(mine) > ENTRIES_PER_STUDENT:
                gone = next((e for e in mine if e["why"] is not None), mine[0])
                entries.remove(gone)
            return _replace(room, entries=tuple(entries))

        return self._update(change)


def _replace(room: Room, **changes: Any) -> Room:
    from dataclasses import replace

    return replace(room, **changes)


# ---- the board and its export --------------------------------------------------------------------------------
def board(room: Room) -> list[dict[str, Any]]:
    """The class's scored runs, best first, each student's design once (their best try): the order of
    `explorer.challenge.ranked`, whose key is (0, steps) for a run that reached the target, then (1, last loss) for
    one that did not. Equal keys keep the order the runs were posted in (the sort is stable), so of two students
    with the same steps the one who posted first ranks higher. Each row: rank, name, design, shortcuts, steps,
    final_loss."""
    from explorer import challenge

    scored = [{**e, "design": (e["owner"], e["design"])} for e in room.entries if e["why"] is None]
    rows = challenge.ranked(scored)  # a (student, design) pair counts once, as a design does in a session's table
    return [{"rank": rank, "name": room.names.get(row["owner"], "?"), "design": row["design"][1],
             "shortcuts": row["shortcuts"], "steps": row["steps"], "final_loss": row["final_loss"],
             "owner": row["owner"], "job": row["job"]}
            for rank, row in enumerate(rows, start=1)]


def unscored(room: Room) -> list[dict[str, Any]]:
    """The runs posted that are not scored, newest first: name, run label and why (explorer.challenge.judge)."""
    return [{"name": room.names.get(e["owner"], "?"), "label": e["label"], "why": e["why"]}
            for e in reversed(room.entries) if e["why"] is not None]


def safe_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: text starting with = + - @ (or a tab or carriage return) gets a
    leading apostrophe, so it is not run as a formula; numbers stay numbers."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


CSV_COLUMNS = ("rank", "name", "design", "shortcuts", "steps_to_target", "last_loss", "scored", "why", "run_label",
               "job", "posted_utc")


def csv_text(room: Room) -> str:
    """Every run posted to the class, oldest first, as CSV: its board rank (blank when it is not the student's best
    try of that design, or not scored), name, design, steps to the target, last loss, whether it is scored and why
    not, the run's label and job, when it was posted. Every cell goes through `safe_cell`."""
    ranks = {(row["owner"], row["job"]): row["rank"] for row in board(room)}
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for e in room.entries:
        posted = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["at"]))
        writer.writerow([safe_cell(v) for v in (
            ranks.get((e["owner"], e["job"]), ""), room.names.get(e["owner"], "?"), e["design"] or "",
            "" if e["shortcuts"] is None else e["shortcuts"], "" if e["steps"] is None else e["steps"],
            "" if e["final_loss"] is None else e["final_loss"], "yes" if e["why"] is None else "no", e["why"] or "",
            e["label"], e["job"], posted)])
    return out.getvalue()


def design_label(spec: Any) -> str:
    """A run's design in the i:j notation ("0:4,1:3"; "none" for no shortcut), or its topology's name for a
    topology that is not a list of shortcuts (the class page's view of the room)."""
    from explorer.topology import parse_shortcuts, shortcuts_text

    topology = spec.topology
    if topology.name == "shortcuts":
        try:
            return shortcuts_text(parse_shortcuts(topology.params.get("shortcuts", ""), None, "topology.shortcuts")) \
                or "none"
        except SpecError:
            return str(topology.params.get("shortcuts"))[:200]
    return topology.name
