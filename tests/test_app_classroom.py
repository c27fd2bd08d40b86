"""The teacher's page (app/views/classroom.py) in Streamlit's AppTest: nothing without the server's token, a class
started from it, a pushed link above every page (the teacher's line escaped), the students' named runs on its
board, the answer shown to students once revealed, and a lowered job limit that the queue enforces."""

import explorer
from conftest import plain
from explorer import challenge
from explorer.classroom import Classroom

TOKEN = "s3cret"
HOSTILE = "[log in](http://evil.example) <b>x</b> ![i](http://evil.example/i.png)"
PAGES = ("train", "inside", "compare", "papers", "theory", "admin")  # the class page says what it pushed


def keys(at) -> set[str]:
    return {str(b.key) for b in at.button}


def test_the_teacher_starts_a_class_pushes_a_link_and_sees_the_named_board(open_page, monkeypatch, explorer_home):
    monkeypatch.setenv("EXPLORER_ADMIN_TOKEN", TOKEN)
    teacher = open_page("classroom", query={"token": TOKEN})
    assert not teacher.exception and "token" not in teacher.query_params  # out of the address bar
    teacher.button(key="class-start").click().run()
    assert Classroom(explorer_home).read().open
    teacher.text_input(key="class-link-message").set_value(HOSTILE[:200]).run()
    teacher.selectbox(key="class-link-preset").set_value("ancre-fig2a-K4").run()
    teacher.button(key="class-push").click().run()
    assert not teacher.exception and Classroom(explorer_home).read().link == "preset=ancre-fig2a-K4"

    student = open_page("train")
    banner = [m.value for m in student.markdown if "From your teacher" in m.value]
    assert len(banner) == 1 and "](http" not in banner[0] and "<b>" not in banner[0]  # shown as text
    assert HOSTILE in plain(banner[0])
    links = student.get("page_link")
    assert len(links) == 1 and "ancre-fig2a-K4" in links[0].proto.query_string
    student.text_input(key="class-name").set_value(HOSTILE[:40]).run()
    student.session_state["challenge-tries"] = {  # two ended runs, as scored_tries leaves them
        "job-1": {"design": "0:4", "shortcuts": 1, "steps": 144, "final_loss": 4e-13, "label": "linear #1"},
        "job-2": {"design": None, "why": "optim.lr is 0.1 here", "label": "linear #2"}}
    student.run()
    assert not student.exception
    board = next(e for e in student.expander if e.label == "Design challenge").dataframe
    assert [list(d.value["name"]) for d in board if "name" in d.value] == [[HOSTILE[:40]]]
    assert not [t for t in student.toggle if t.key == "challenge-reveal"]  # hidden until the teacher reveals it

    teacher.run()
    shown = teacher.dataframe[0].value
    assert list(shown["name"]) == [HOSTILE[:40]] and list(shown["design"]) == ["0:4"]
    assert not any("](http" in m.value for m in teacher.markdown)
    teacher.button(key="class-reveal").click().run()
    student.run()
    assert [t for t in student.toggle if t.key == "challenge-reveal"]
    student.toggle(key="challenge-reveal").set_value(True).run()
    assert any(challenge.REFERENCE_DESIGN in plain(i.value) for i in student.info)

    teacher.button(key="class-clear").click().run()
    assert not [m for m in open_page("theory").markdown if "From your teacher" in m.value]


def test_without_the_token_the_page_shows_nothing_and_writes_nothing(open_page, monkeypatch, explorer_home):
    monkeypatch.setenv("EXPLORER_ADMIN_TOKEN", TOKEN)
    Classroom(explorer_home).start()
    before = (explorer_home / "class.json").read_bytes()
    for query in ({}, {"token": ""}, {"token": "guess"}, {"token": TOKEN.upper()}):
        page = open_page("classroom", query=query)
        assert [t.value for t in page.title] == ["Class"]  # the page itself, stopped after its one line
        assert not page.exception and not any(k.startswith("class-") for k in keys(page))
        assert not page.dataframe and not page.get("download_button")
    forged = open_page("train")
    forged.session_state["admin-token"] = "guess"  # a session cannot hand itself the token either
    forged.switch_page("views/classroom.py").run()
    assert [t.value for t in forged.title] == ["Class"]
    assert not any(k.startswith("class-") for k in keys(forged))
    assert (explorer_home / "class.json").read_bytes() == before
    monkeypatch.delenv("EXPLORER_ADMIN_TOKEN")
    page = open_page("classroom", query={"token": ""})  # no token set: an empty one must not match
    assert not any(k.startswith("class-") for k in keys(page))


def test_the_banner_shows_on_every_page(open_page, monkeypatch, explorer_home):
    monkeypatch.setenv("EXPLORER_ADMIN_TOKEN", TOKEN)
    room = Classroom(explorer_home)
    room.start()
    room.push_design("0:4", "Train *this* one")
    for name in PAGES:
        page = open_page(name, query={"token": TOKEN})
        said = [plain(m.value) for m in page.markdown if "From your teacher" in m.value]
        assert not page.exception and said and "Train *this* one" in said[0], name
        links = page.get("page_link")
        assert len(links) == 1 and "topology.shortcuts=0%3A4" in links[0].proto.query_string, name


def test_a_lowered_limit_takes_effect_on_the_queue(open_page, monkeypatch, explorer_home):
    monkeypatch.setenv("EXPLORER_ADMIN_TOKEN", TOKEN)
    teacher = open_page("classroom", query={"token": TOKEN})
    teacher.button(key="class-start").click().run()
    teacher.number_input(key="class-per-session").set_value(1).run()
    teacher.button(key="class-limits").click().run()
    assert not teacher.exception and Classroom(explorer_home).read().per_session == 1
    assert any("Now: 1 per student" in plain(c.value) for c in teacher.caption)
    student = open_page("compare")
    student.multiselect(key="compare-topologies").set_value(["cascaded", "none"]).run()
    student.button(key="compare-launch").click().run()
    refused = [plain(e.value) for e in student.error if "Not launched" in plain(e.value)]
    assert len(refused) == 1 and "the class's limit, set by the teacher" in refused[0], refused
    assert "EXPLORER_MAX_JOBS_PER_SESSION=4" in refused[0]
    teacher.number_input(key="class-per-session").set_value(4).run()  # the server's own again
    teacher.button(key="class-limits").click().run()
    assert Classroom(explorer_home).read().per_session == 4
    assert teacher.number_input(key="class-per-session").max == explorer.settings.number(
        "EXPLORER_MAX_JOBS_PER_SESSION")  # the teacher cannot ask for more than the server's setting
