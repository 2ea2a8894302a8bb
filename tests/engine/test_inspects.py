"""A look at the containers inspects only what Docker says changed since the last look: a
new container, one an event tells of, one whose state or name `docker ps` gives otherwise,
and every one where Docker's events cannot say."""

from doubles import DockerAnswers
from test_docker import BY_INDEX, MACHINE, visible_to_all

from gpuspawner.engine.docker import DockerEngine
from gpuspawner.engine.inspects import EVENTS_KEPT


def reaches(engine: DockerEngine) -> dict[str, set[str]]:
    return {c.id: c.reach.uuids(BY_INDEX, MACHINE) for c in engine.containers()}


def looked_at_twice() -> tuple[DockerAnswers, DockerEngine, dict[str, set[str]]]:
    answers = DockerAnswers(visible_to_all("ann", Runtime="nvidia"), visible_to_all("bob"))
    engine = DockerEngine(answers)
    first = reaches(engine)
    assert sorted(answers.inspected) == ["ann", "bob"]
    answers.inspected.clear()
    return answers, engine, first


def test_a_look_inspects_no_container_docker_told_nothing_of():
    answers, engine, first = looked_at_twice()
    assert reaches(engine) == first == {"ann": set(MACHINE), "bob": set(MACHINE)}
    assert answers.inspected == []
    assert answers.infos == 2  # bob has no runtime of his own: the engine's, at each look


def test_a_new_container_or_one_an_event_tells_of_is_inspected_again():
    answers, engine, _ = looked_at_twice()
    answers.running["cat"] = visible_to_all("cat", Runtime="nvidia")
    answers.tell("bob")
    reaches(engine)
    assert sorted(answers.inspected) == ["bob", "cat"]


def test_a_container_whose_state_or_name_docker_ps_gives_otherwise_is_inspected_again():
    answers, engine, _ = looked_at_twice()
    answers.running["ann"] = visible_to_all("ann", Runtime="nvidia") | {"Name": "/ann-renamed"}
    answers.running["bob"]["State"]["Status"] = "paused"
    found = {c.id: c.name for c in engine.containers()}
    assert sorted(answers.inspected) == ["ann", "bob"]
    assert found["ann"] == "ann-renamed"


def test_where_docker_cannot_say_what_changed_every_container_is_inspected_again():
    answers, engine, _ = looked_at_twice()
    answers.tell(*["someone-else"] * EVENTS_KEPT)  # as many as Docker keeps: some may be lost
    reaches(engine)
    assert sorted(answers.inspected) == ["ann", "bob"]
    answers.inspected.clear()
    answers.mute()
    reaches(engine)
    assert sorted(answers.inspected) == ["ann", "bob"]
