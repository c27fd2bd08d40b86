"""The class file (explorer.classroom): its bounds, names kept as typed (the pages escape them), writes from two
threads that both land, a CSV no spreadsheet runs as formulas, the board in the challenge's order with ties kept
in posting order, the answer's reveal and the teacher's limits under the server's."""

import csv
import io
import json
import threading

import pytest

from explorer import challenge, classroom
from explorer.classroom import Classroom, board, csv_text, safe_cell, unscored
from explorer.registries import SpecError


def scored(design: str, steps: int | None, loss: float = 1e-7) -> dict:
    """A row as challenge.judge gives it for a scored run."""
    return {"design": design, "shortcuts": design.count(":"), "steps": steps, "final_loss": loss}


@pytest.fixture
def room(tmp_path):
    room = Classroom(tmp_path)
    room.start()
    return room


def test_no_file_is_no_class_and_a_started_class_survives_a_new_reader(tmp_path):
    assert Classroom(tmp_path).read() == classroom.Room() and not Classroom(tmp_path).read().open
    Classroom(tmp_path).start()
    Classroom(tmp_path).set_name("browser-a", "Ada")
    again = Classroom(tmp_path).read()  # as after a server restart: only the file
    assert again.open and again.names == {"browser-a": "Ada"}
    assert json.loads((tmp_path / classroom.FILE).read_text())["names"] == {"browser-a": "Ada"}


def test_writes_need_a_running_class_and_ending_it_clears_everything(tmp_path):
    room = Classroom(tmp_path)
    for write in (lambda: room.set_name("b", "Ada"), lambda: room.reveal(), lambda: room.push_preset("ancre-fig2a-K4")):
        with pytest.raises(SpecError, match="no class is running") as refused:
            write()
        assert refused.value.path == "class"
    room.start()
    room.set_name("b", "Ada")
    room.post("b", "job-1", "run 1", scored("0:4", 120))
    room.push_design("0:4")
    room.end()
    assert room.read() == classroom.Room()


def test_names_messages_and_links_are_bounded_and_kept_as_typed(room):
    hostile = "[log in](http://evil.example) <img src=x onerror=alert(1)> **bold** $x$"[:classroom.NAME_CHARS]
    room.set_name("browser-a", hostile)
    assert room.read().names["browser-a"] == hostile  # stored as typed: the pages escape it when they show it
    room.set_name("browser-b", "Bo\nb\t\x00 ")
    assert room.read().names["browser-b"] == "Bo b"  # one line, control characters gone
    with pytest.raises(SpecError, match=f"at most {classroom.NAME_CHARS}") as refused:
        room.set_name("browser-c", "x" * (classroom.NAME_CHARS + 1))
    assert refused.value.path == "name" and "\n" not in str(refused.value)
    with pytest.raises(SpecError, match="empty"):
        room.set_name("browser-c", "  \n ")
    with pytest.raises(SpecError, match=f"at most {classroom.MESSAGE_CHARS}") as refused:
        room.push_preset("ancre-fig2a-K4", "m" * (classroom.MESSAGE_CHARS + 1))
    assert refused.value.path == "message"
    with pytest.raises(SpecError) as refused:
        room.push_preset("no-such-preset")
    assert refused.value.path == "preset"
    with pytest.raises(SpecError) as refused:
        room.push_design("0:1,0:2,0:3")  # three shortcuts: the challenge allows two
    assert refused.value.path == "topology.shortcuts"
    room.push_design("0:4 ", "Try [this](http://x)")
    now = room.read()
    assert now.link_params()["topology.shortcuts"] == "0:4" and now.link_text == "the challenge design 0:4"
    assert now.message == "Try [this](http://x)" and len(now.link) <= classroom.LINK_CHARS
    room.push_preset("ancre-fig2a-K4")
    assert room.read().link_params() == {"preset": "ancre-fig2a-K4"}
    room.clear_link()
    assert room.read().link == "" and room.read().link_params() == {}


def test_the_board_holds_at_most_its_students_and_each_ones_entries(room, monkeypatch):
    monkeypatch.setattr(classroom, "MAX_STUDENTS", 3)
    for i in range(3):
        room.set_name(f"b{i}", f"student {i}")
    with pytest.raises(SpecError, match=r"full \(3 names\)"):
        room.set_name("b3", "one too many")
    room.set_name("b0", "renamed")  # a student already there may rename
    with pytest.raises(SpecError, match="display name first"):
        room.post("nobody", "j", "run", scored("0:4", 100))
    room.post("b0", "first", "run", {"design": None, "why": "stopped at step 3"})
    for i in range(classroom.ENTRIES_PER_STUDENT + 5):
        room.post("b0", f"job-{i}", "run", scored("0:4", 100 + i))
    room.post("b0", f"job-{classroom.ENTRIES_PER_STUDENT + 4}", "run", scored("0:4", 1))  # a job posts once
    mine = [e for e in room.read().entries if e["owner"] == "b0"]
    assert len(mine) == classroom.ENTRIES_PER_STUDENT
    assert all(e["why"] is None for e in mine) and mine[-1]["job"] == f"job-{classroom.ENTRIES_PER_STUDENT + 4}"
    assert (room.root / classroom.FILE).stat().st_size < classroom.FILE_BYTES


def test_a_damaged_or_oversized_file_reads_as_no_class_and_the_next_write_replaces_it(tmp_path):
    path = tmp_path / classroom.FILE
    path.write_text('{"open": true, "names": {"b": "' + "x" * 500 + '"}}')  # a name past its bound
    damaged = Classroom(tmp_path).read()
    assert not damaged.open and "damaged" in damaged.damaged
    path.write_text("[not json")
    assert "damaged" in Classroom(tmp_path).read().damaged
    Classroom(tmp_path).start()
    assert Classroom(tmp_path).read().open and Classroom(tmp_path).read().damaged is None


def test_two_threads_posting_at_once_lose_nothing(room):
    room.set_name("b1", "Ada")
    room.set_name("b2", "Bob")
    start = threading.Barrier(2)
    errors = []

    def post(owner: str) -> None:
        start.wait()
        try:
            for i in range(classroom.ENTRIES_PER_STUDENT):
                Classroom(room.root).post(owner, f"{owner}-{i}", "run", scored("0:4", 100 + i))
        except Exception as error:  # noqa: BLE001  (reported below)
            errors.append(error)

    threads = [threading.Thread(target=post, args=(owner,)) for owner in ("b1", "b2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    entries = room.read().entries
    assert sorted(e["job"] for e in entries) == sorted(f"{o}-{i}" for o in ("b1", "b2")
                                                       for i in range(classroom.ENTRIES_PER_STUDENT))
    assert not list(room.root.glob(".class.json.*.tmp"))  # every temporary file was renamed or removed


def test_the_csv_escapes_formulas_and_keeps_numbers(room):
    for owner, name in (("b1", "=HYPERLINK(\"http://x\")"), ("b2", "+1"), ("b3", "@SUM(A1)"), ("b4", "-2"),
                        ("b5", "Ada")):
        room.set_name(owner, name)
        room.post(owner, f"job-{owner}", "=cmd|' /C calc'!A0", scored("0:4", 100))
    assert safe_cell("=1") == "'=1" and safe_cell("\tx") == "'\tx" and safe_cell(-1.5) == -1.5
    rows = list(csv.DictReader(io.StringIO(csv_text(room.read()))))
    assert [row["name"] for row in rows] == ["'=HYPERLINK(\"http://x\")", "'+1", "'@SUM(A1)", "'-2", "Ada"]
    assert all(row["run_label"].startswith("'=") for row in rows)
    assert all(not cell.startswith(classroom.FORMULA_START) for row in rows for cell in row.values())
    assert [row["steps_to_target"] for row in rows] == ["100"] * 5 and rows[0]["last_loss"] == "1e-07"


def test_the_board_ranks_as_the_challenge_does_and_ties_keep_their_posting_order(room):
    for owner, name in (("b1", "first"), ("b2", "second"), ("b3", "third")):
        room.set_name(owner, name)
    room.post("b2", "j1", "run", scored("0:4", 120))
    room.post("b1", "j2", "run", scored("0:2,0:4", 120))  # the same steps, posted later
    room.post("b3", "j3", "run", scored("0:1", None, loss=1e-3))  # did not reach the target
    room.post("b3", "j4", "run", scored("0:3,0:4", 90))
    room.post("b3", "j5", "run", scored("0:3,0:4", 95))  # the same student's same design: its best try counts
    room.post("b1", "j6", "run", {"design": None, "why": "optim.lr is 0.1 here; the challenge's set-up has 0.05"})
    rows = board(room.read())
    assert [(row["name"], row["design"], row["steps"]) for row in rows] == [
        ("third", "0:3,0:4", 90), ("second", "0:4", 120), ("first", "0:2,0:4", 120), ("third", "0:1", None)]
    assert [row["rank"] for row in rows] == [1, 2, 3, 4]
    entries = [e for e in room.read().entries if e["why"] is None]
    assert [r["design"] for r in challenge.ranked(entries)][:2] == ["0:3,0:4", "0:4"]  # the key the board uses
    assert unscored(room.read()) == [{"name": "first", "label": "run", "why": "optim.lr is 0.1 here; the "
                                                                          "challenge's set-up has 0.05"}]


def test_the_answer_shows_only_once_revealed_and_can_be_hidden_again(room):
    assert not room.read().revealed
    room.reveal()
    assert room.read().revealed
    room.reveal(False)
    assert not room.read().revealed


def test_the_teacher_may_lower_the_job_limits_but_not_raise_them_above_the_servers(room):
    room.set_limits(2, 10, server_per_session=4, server_per_address=40)
    assert (room.read().per_session, room.read().per_address) == (2, 10)
    with pytest.raises(SpecError, match=r"above this server's 4 \(EXPLORER_MAX_JOBS_PER_SESSION=4\)") as refused:
        room.set_limits(9, None, server_per_session=4, server_per_address=40)
    assert refused.value.path == "per_session"
    with pytest.raises(SpecError, match="at least 1"):
        room.set_limits(0, None, server_per_session=4, server_per_address=40)
    room.set_limits(None, None, server_per_session=4, server_per_address=40)
    assert (room.read().per_session, room.read().per_address) == (None, None)


def test_a_read_parses_the_file_again_only_when_it_changed(room, monkeypatch):
    first = room.read()
    calls = []
    parse = Classroom._parse
    monkeypatch.setattr(Classroom, "_parse", lambda self: calls.append(1) or parse(self))
    assert room.read() is first and calls == []
    Classroom(room.root).set_name("b", "Ada")  # _update parses once under the lock
    calls.clear()
    assert room.read().names == {"b": "Ada"} and calls == [1]
    assert room.read().names == {"b": "Ada"} and calls == [1]


def test_design_label_names_a_runs_shortcuts_or_its_topology():
    assert classroom.design_label(challenge.challenge_spec("0:4*1")) == "0:4"
    assert classroom.design_label(challenge.challenge_spec("none")) == "none"
