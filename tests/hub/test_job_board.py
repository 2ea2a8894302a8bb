"""The jobs' board in process, on a broker over simulated GPUs and a stand-in for the hub's
side of servers (`Servers`): one job's fault costs only that job, the job names are the
hub's, every ended job's server is removed though one of them cannot be, and a user's list
keeps every job that has not ended (the real stack: tests/stack/test_jobs_hub.py)."""

import asyncio
import logging
from types import SimpleNamespace

import pytest
from brokers import a_broker

from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.job_rules import job_rules
from gpuspawner.core.jobs import JobSpec, JobState
from gpuspawner.core.pool import Holder
from gpuspawner.core.units import Request
from gpuspawner.devices.checkpoint import OnThisHost
from gpuspawner.devices.simulated_checkpoint import SimulatedCheckpointDriver
from gpuspawner.hub.jobs.board import JobBoard
from gpuspawner.hub.reclaim.parking import Parker
from gpuspawner.records.jobs import JobRecord

LOG = logging.getLogger("test")
ALICE, BOB, CAROL, DAVE = 1, 2, 3, 4
SETTINGS = GPUSettings(
    simulate_gpus=2,
    profiles=[{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}],
    default_limits={"max_jobs": 50, "max_wait": 600},
)


class Servers:
    """The hub's named servers as the board sees them (`hub.jobs.launch.Launcher`): ids handed
    out by name, starts noted, and removals, one of which may fail."""

    def __init__(self) -> None:
        self.ids: dict[tuple[int, str], int] = {}
        self.started: list[str] = []
        self.stopped: list[tuple[int, str]] = []
        self.named: list[tuple[int, str]] = []  # (user id, name), as JupyterHub lists them
        self.removed: list[tuple[int, str]] = []
        self.fails: set[tuple[int, str]] = set()

    def server_id(self, user_id: int, server: str) -> int:
        return self.ids.setdefault((user_id, server), len(self.ids) + 100)

    async def start(self, user_id: int, server: str, options: dict) -> None:
        self.started.append(server)

    def user(self, user_id: int) -> SimpleNamespace:
        return SimpleNamespace(spawners={})  # no spawner to leave a stop's reason with

    async def stop(self, user_id: int, server: str) -> None:
        """Asked; its GPUs are not being freed until the test says (`release_when_gone`)."""
        self.stopped.append((user_id, server))

    def named_servers(self, prefix: str) -> list[tuple[int, str]]:
        return [(u, name) for u, name in self.named if name.startswith(prefix)]

    async def remove(self, user_id: int, server: str) -> bool:
        if (user_id, server) in self.fails:
            raise RuntimeError("database is locked")
        self.removed.append((user_id, server))
        return True


class FailsOnce(JobRecord):
    """A jobs table whose first write of a started job fails (a full disk, say)."""

    failed = False

    def save(self, job):
        if job.state is JobState.STARTING and not self.failed:
            self.failed = True
            raise OSError("No space left on device")
        super().save(job)


@pytest.fixture
def make_board(tmp_path):
    boards = []

    def make(record_class=JobRecord, open_now=True, parking=False):
        broker = a_broker(SETTINGS)
        servers = Servers()
        limits = broker.site.limits

        def rules_of(user_id):
            return limits.for_user(set(), False), job_rules(limits, set())

        record = record_class(tmp_path / f"jobs-{len(boards)}.sqlite")
        parker = None
        if parking:  # a driver that parks nothing here: it has not seen a process yet
            on_host = OnThisHost(SimulatedCheckpointDriver(), lambda asked: {})
            parker = Parker(broker, lambda node: on_host, 64 * 2**30, LOG)
        board = JobBoard(
            broker, servers, record, rules_of, lambda user_id, limits: None, LOG, parker
        )
        broker.serve_jobs(board)
        boards.append(board)
        if open_now:
            board.open()
        return board, servers

    yield make
    for board in boards:
        board.close()


def script(path="train.py"):
    return JobSpec("gpu-1", script=path)


async def settled(board):
    """Until the board's own tasks (starts, removals, GPUs given back) have run."""
    while board._tasks:
        await asyncio.gather(*list(board._tasks))


def free_gpus(board) -> int:
    return sum(1 for u in board.broker.pool.units if board.broker.pool.holder_of(u.id) is None)


async def test_a_job_whose_server_already_holds_gpus_fails_alone(make_board):
    """Alice's server named as her next job's holds a GPU (started by hand before the names
    were the hub's): her submission fails that job with the reason, and answers; Bob's is
    dispatched as ever, in that pass and in his own submission."""
    board, servers = make_board(open_now=False)
    held = Holder(servers.server_id(ALICE, "job-1"), ALICE, "alice", "job-1")
    board.broker.take_now(held, 1)
    alices = board.submit(ALICE, "alice", script())  # waits: the hub is not open yet
    bobs = board.submit(BOB, "bob", script())
    assert (alices.id, alices.state, bobs.state) == (1, JobState.WAITING, JobState.WAITING)

    board.open()  # the pass meets Alice's job first
    await settled(board)
    failed = board.job(alices.id)
    assert failed.state is JobState.FAILED
    assert "could not start it" in failed.reason and "holds no GPU" in failed.reason
    assert board.job(bobs.id).state is JobState.RUNNING
    assert servers.started == ["job-2"]
    assert board.broker.grant_of(held.spawner_id) is not None  # her server keeps its GPU


async def test_a_submission_answers_though_its_dispatch_fails(make_board):
    board, servers = make_board()
    board.broker.take_now(Holder(servers.server_id(ALICE, "job-1"), ALICE, "alice", "job-1"), 1)
    submitted = board.submit(ALICE, "alice", script())  # before: AlreadyHolding, a 500
    assert submitted.state is JobState.FAILED  # as the board has it now, not as written first
    assert board.submit(BOB, "bob", script()).state is JobState.STARTING
    await settled(board)


async def test_gpus_taken_for_a_job_whose_start_then_fails_go_back(make_board):
    board, servers = make_board(record_class=FailsOnce)
    job = board.submit(ALICE, "alice", script())
    await settled(board)
    assert board.job(job.id).state is JobState.FAILED
    assert free_gpus(board) == 2 and servers.started == []


@pytest.mark.parametrize(
    ("server", "says"),
    [
        ("train", None),  # a person's own name
        ("job-train", None),
        ("job-2", "names job-<number> are the hub's"),  # the next job's: no such job yet
        ("job-99999999999999999999999", "names job-<number> are the hub's"),
        ("job-1", "It waits for free GPUs."),
    ],
)
async def test_every_job_name_is_the_hubs_to_start(make_board, server, says):
    board, _ = make_board(open_now=False)
    board.submit(ALICE, "alice", script())
    refusal = board.refuses_by_hand(ALICE, server)
    assert refusal == says if says is None else says in refusal


async def test_a_job_that_ran_is_run_again_by_submitting_it_one_that_never_ran_by_running_it(
    make_board,
):
    board, _ = make_board()
    ran = board.submit(ALICE, "alice", script())
    await settled(board)
    board.report(board.job(ran.id), {"state": "done"})  # (its server's GPU not back yet)
    board.broker.take_now(Holder(1, BOB, "bob", ""), 1)  # no GPU left: the next one waits
    never = board.submit(ALICE, "alice", script())
    never = board.cancel(board.job(never.id))
    await settled(board)
    assert "to run it again, submit" in board.refuses_by_hand(ALICE, ran.server)
    assert "outputs are in ~/jobs/job-1" in board.refuses_by_hand(ALICE, ran.server)
    assert "before it ever ran; to run it, submit" in board.refuses_by_hand(ALICE, never.server)
    assert "it had not started, so it wrote nothing" in never.reason
    assert board.refuses_by_hand(BOB, ran.server).startswith("job-1 is named as")  # not his


async def test_one_server_that_cannot_be_removed_stops_no_other_removal(make_board):
    board, servers = make_board()
    ended = board.submit(ALICE, "alice", script())
    await settled(board)
    board.cancel(board.job(ended.id))
    servers.named = [
        (BOB, "job-99999999999999999999999"),  # before: OverflowError, and nothing else went
        (BOB, "job-7"),  # its remove fails
        (ALICE, ended.server),
        (ALICE, "job-train"),  # a person's own name: kept
        (BOB, "job-8"),  # a stray one a refused start made
    ]
    servers.fails = {(BOB, "job-7")}
    board.tick(board.broker.clock())
    await settled(board)
    assert servers.removed == [
        (BOB, "job-99999999999999999999999"),
        (ALICE, ended.server),
        (BOB, "job-8"),
    ]


async def test_a_users_list_keeps_every_unfinished_job_and_pages_the_ended(make_board):
    board, _ = make_board()
    board.broker.take_now(Holder(1, BOB, "bob", ""), 2)  # no GPU free: her jobs wait
    early = [board.submit(ALICE, "alice", script()) for _ in range(3)]
    for job in [board.submit(ALICE, "alice", script()) for _ in range(5)]:
        board.cancel(job)
    board.submit(BOB, "bob", script())
    first = board.jobs_of(ALICE, limit=2)
    assert [j.id for j in first.jobs[:3]] == [3, 2, 1]  # every unfinished one, newest first
    assert [j.id for j in first.jobs[3:]] == [8, 7] and first.next_after == 7
    rest = board.jobs_of(ALICE, 2, after=board.job(first.next_after))
    assert [j.id for j in rest.jobs] == [6, 5] and rest.next_after == 5
    last = board.jobs_of(ALICE, 2, after=board.job(rest.next_after))
    assert [j.id for j in last.jobs] == [4] and last.next_after is None
    assert all(not j.final for j in early)


async def test_a_job_giving_way_stops_no_parked_person_while_its_container_stops(make_board):
    """Carol's server is parked on one GPU; Alice's job runs on the other and cannot be
    parked, so it gives way by SIGTERM to Dave's start. Until Docker says its container is
    gone, every pass of the line counts that GPU as Dave's: none stops Carol's server,
    which Dave's start never needed."""
    board, servers = make_board(parking=True)
    broker = board.broker
    carol = broker.take_now(Holder(servers.server_id(CAROL, ""), CAROL, "carol"), 1)
    job = board.submit(ALICE, "alice", script())
    await settled(board)
    assert board.job(job.id).state is JobState.RUNNING
    broker.parked(carol.key)

    dave = Holder(servers.server_id(DAVE, ""), DAVE, "dave")
    limits = broker.site.limits.for_user(set())
    start = asyncio.ensure_future(broker.line.take(dave, "gpu-1", "1 GPU", Request(1), limits))
    await asyncio.sleep(0)  # Dave waits in line: his start ran the jobs' pass
    await settled(board)
    assert board.job(job.id).state is JobState.GIVING_WAY
    assert servers.stopped == [(ALICE, "job-1")]

    board.line_ran()  # another pass (a monitor tick, a release) while the job's container stops
    await settled(board)
    assert servers.stopped == [(ALICE, "job-1")]  # not Carol's
    assert broker.grant_of(carol.key) is not None and not start.done()

    job_key = servers.server_id(ALICE, "job-1")
    await asyncio.wait_for(broker.release_when_gone(job_key), 10)  # the job's container is gone
    assert len((await start).units) == 1
    assert broker.grant_of(carol.key) is not None  # still parked, her files and kernel kept
