"""A trace replayed through the real core, minute by minute, on a clock the simulator owns.

Each simulated minute does what the hub and the people do in it:
1. people who want a GPU server ask: `Pool.allocate` with the person's
   `UserLimits.admit`, exactly as a spawn does. A refusal (409 no capacity, 403
   a limit) sends them away to try again RETRY_MINUTES later; with the queue,
   they wait in line instead (unless a limit other than their group's quota
   refuses them, as the hub's line does), and the line (`line.Line`) says who
   starts;
2. gpuspawner's monitor (where the policy has it) samples each server's GPUs
   into `Telemetry`, asks `Busyness.of`, keeps `IdleClock`, counts busy GPUs as
   activity and stops what `culling.decide` says; jupyterhub-idle-culler (where
   the policy has it) stops what `culling.idle_arbiter` says, from the server's
   last activity and its group's idle_timeout;
3. the minute is counted: GPUs held, busy, and wanted by people still waiting;
4. every session moves one minute along its pattern; one that ends stops its
   server, or leaves it running with the tab closed or open.

People, as modelled (each a stated assumption, see benchmarks/README.md):
- a refused person retries every RETRY_MINUTES until they get their GPUs, and
  then does all the work they came for: waiting shifts work, it loses none;
- a person whose server is stopped while they still work comes back when the
  segment they were in would have ended (the end of their pause, or of the run
  they expected), asks again, and goes on from the next segment; a stopped
  busy segment is lost and run again from its start (no checkpoint), this time
  with the person at the notebook (whoever lost a run to the culler stays);
- someone coming back to a server of theirs that is still running uses it
  (when it has the GPUs they want; otherwise they stop it and ask anew);
- starting and removing a container take no time (seconds, against minutes).

A training run started as a notebook server of its own (today's way, on the
training team's week) is one session more, `runs` says which: its waits and
its end go to its turnaround, not to people's waits. With jobs, `board.JobsReplay`
adds the hub's job board to the same minute.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuspawner.core.culling import IdleClock, decide, idle_arbiter
from gpuspawner.core.gpus import Telemetry
from gpuspawner.core.limits import LimitExceeded, UserLimits
from gpuspawner.core.line import Outcome as Tried
from gpuspawner.core.line import Waiting
from gpuspawner.core.pool import Holder, NotEnoughGPUs
from gpuspawner.core.units import Request

from .books import RememberingPool
from .line import Line
from .measures import Outcome
from .policies import Policy
from .site import Site
from .trace import Segment, Session

RETRY_MINUTES = 5
MINUTE = 60.0
WORKING = Telemetry(utilization_percent=100.0, processes=(1,))
IDLE_WITH_KERNEL = Telemetry(utilization_percent=0.0, processes=(1,))
IDLE = Telemetry(utilization_percent=0.0)


@dataclass
class Work:
    """One session's progress: asking for a server, working on one, or done."""

    session: Session
    order: int
    key: int  # the server's spawner id: one per (user, server name)
    user_id: int
    limits: UserLimits
    gpus: int  # what it asks for (the fixed split caps it to the person's own GPUs)
    segment: int = 0
    elapsed: int = 0  # minutes into the segment
    due: float = 0.0  # when it asks (again)
    asked: float | None = None  # its first request since it last had a server
    quota_held: bool = False  # since then, a quota held it (its own or its group's GPUs)
    refused_by: str = ""  # its latest refusal: "capacity", or the limit's key
    rerun: int | None = None  # a segment whose run was stopped: run again, at the notebook

    def segment_now(self) -> Segment:
        segment = self.session.pattern[self.segment]
        if self.rerun == self.segment and not segment.present:
            return Segment("B", segment.minutes)
        return segment

    @property
    def finished(self) -> bool:
        return self.segment >= len(self.session.pattern)


@dataclass
class Server:
    work: Work | None  # None: nobody works on it, it runs on ("lingers")
    user: str
    key: int
    gpus: int
    since: float
    limits: UserLimits
    idle_processes: bool
    last_activity: float
    tab_open: bool = True
    busy: bool = False  # this minute


class Replay:
    def __init__(
        self,
        sessions: list[Session],
        site: Site,
        policy: Policy,
        start: datetime,
        minutes: int,
        runs: Collection[int] = (),
        more_users: Sequence[str] = (),
    ) -> None:
        self.site, self.policy, self.minutes = site, policy, minutes
        self.now = 0.0
        self.out = Outcome(site.gpus)
        self.idle = IdleClock()
        self.servers: dict[int, Server] = {}
        self.users = list(dict.fromkeys([*(s.user for s in sessions), *more_users]))
        self.keys = list(dict.fromkeys((s.user, s.server) for s in sessions))
        self.pools = self._books(self.users)
        self.arrivals = [
            self._work(i, s, self.users.index(s.user), self.keys.index((s.user, s.server)), start)
            for i, s in enumerate(sessions)
        ]
        self.runs = frozenset(runs)  # sessions (by order) that are training runs, not people
        self.submitted = {w.order: w.due for w in self.arrivals if w.order in self.runs}
        self.asking: list[Work] = []
        self.line = Line() if policy.queue else None
        self.short: set[int] = set()  # keys whose latest try found too few free GPUs
        self._done: set[int] = set()  # runs (by order) that got done
        self.in_line: list[Work] = []  # who waits in line after this minute's pass, in order

    def _books(self, users: list[str]) -> dict[str, RememberingPool]:
        """The pool each person draws from: one shared, or for the fixed split, their own
        GPUs, dealt round-robin (with more people than GPUs, some people share one)."""
        uuids = self.site.uuids
        clock = lambda: self.now  # noqa: E731
        if not self.policy.fixed:
            shared = RememberingPool(uuids, clock=clock)
            return {user: shared for user in users}
        dealt: dict[str, list[str]] = {user: [] for user in users}
        for k in range(max(len(uuids), len(users))):
            dealt[users[k % len(users)]].append(uuids[k % len(uuids)])
        pools: dict[tuple[str, ...], RememberingPool] = {}
        return {
            user: pools.setdefault(tuple(own), RememberingPool(own, clock=clock))
            for user, own in dealt.items()
        }

    def _work(self, order: int, s: Session, user_id: int, key: int, start: datetime) -> Work:
        gpus = min(s.gpus, len(self.pools[s.user].ids))
        self.out.capped += gpus < s.gpus
        due = (s.arrival - start).total_seconds()
        return Work(s, order, key, user_id, self.site.limits.for_user(s.groups), gpus, due=due)

    def run(self) -> Outcome:
        for minute in range(self.minutes):
            self.now = minute * MINUTE
            self.step()
        self.finish()
        return self.out

    def step(self) -> None:
        """One minute: people ask, the hub watches, the minute is counted, people work."""
        self.ask()
        self.watch()
        self.count()
        self.advance()

    def finish(self) -> None:
        """The replay's end: who still waits, and which runs never got done."""
        waiting = [w for w in self.asking if w.asked is not None and not self.is_run(w)]
        self.out.still_waiting = [self.now - (w.asked or 0.0) for w in waiting]
        self.out.quota_waits += [self.now - (w.asked or 0.0) for w in waiting if w.quota_held]
        end = self.now + MINUTE
        self.out.unfinished += [
            end - due for o, due in self.submitted.items() if o not in self._done
        ]

    def is_run(self, work: Work) -> bool:
        return work.order in self.runs

    # --- 1. people ask -----------------------------------------------------------------
    def ask(self) -> None:
        while self.arrivals and self.arrivals[0].due <= self.now:
            self.asking.append(self.arrivals.pop(0))
        needing: dict[int, Work] = {}
        due = [w for w in self.asking if w.due <= self.now]
        for work in sorted(due, key=lambda w: (w.due, w.order)):
            ready = self.ready(work)
            if ready is None and self.line is None:
                ready = self.grant(work)
            if ready:
                self.asking.remove(work)
            elif ready is None:
                needing[work.key] = work
        self.in_line = []
        if self.line is not None and needing:
            line = [
                Waiting(w.key, w.user_id, "", 0, w.gpus, w.asked or 0.0) for w in needing.values()
            ]
            starting = self.line.starting(
                line, lambda w: self._try(needing[w.key]), self.now, self._behind
            )
            for started in starting:
                self.asking.remove(needing.pop(started.key))
            self.in_line = [needing[key] for key in self.line.order if key in needing]

    def _try(self, work: Work) -> Tried:
        """A start in line tried, as the hub's line tries it: it starts, or it is short of
        GPUs (what frees up may gather for it), or a limit holds it (its group's quota:
        passed over, as freed GPUs cannot help it)."""
        if self.grant(work):
            return Tried.STARTS
        return Tried.SHORT if work.key in self.short else Tried.HELD

    def _behind(self, waiting: Waiting) -> None:
        """A start behind one that freed GPUs are kept for: on whole GPUs nothing is left
        that the head could not use, so the hub finds it short of GPUs."""
        self.short.add(waiting.key)

    def ready(self, work: Work) -> bool | None:
        """True: `work` goes on on a server of theirs still running; False: it waits for its
        own earlier session to end; None: it needs GPUs (from now on it is waiting)."""
        server = self.servers.get(work.key)
        if server is not None and server.work is not None:
            work.due = self.now + MINUTE
            return False
        if server is not None:
            if server.gpus == work.gpus:
                self._resume(server, work)
                return True
            self.stop(server)  # the person stops it, to ask for another size
        if work.asked is None:
            work.asked = self.now
        return None

    def grant(self, work: Work) -> bool:
        """Whether the pool gives `work` its GPUs now; refused, it asks again later (or, with
        a line, stays in it and is looked at again next minute)."""
        s = work.session
        if self.line is None and self.is_run(work) and self.pools[s.user].free_count() < work.gpus:
            work.due = self.now + RETRY_MINUTES * MINUTE  # a shortcut: the pool would refuse it
            return False
        holder = Holder(work.key, work.user_id, s.user, s.server)
        admit = None if self.policy.fixed else work.limits.admit
        try:
            request = Request(gpus=work.gpus, turns=self.in_turns(work))
            grant = self.pools[s.user].allocate(holder, request, admit)
        except (NotEnoughGPUs, LimitExceeded) as refusal:
            short = isinstance(refusal, NotEnoughGPUs)
            if short:
                self.short.add(work.key)
            else:
                self.short.discard(work.key)
            work.quota_held |= not short  # the person's own limit or their group's quota
            work.refused_by = refusal.key if isinstance(refusal, LimitExceeded) else "capacity"
            waitable = isinstance(refusal, LimitExceeded) and refusal.waitable  # the quota
            in_line = self.line is not None and (short or waitable)
            if not in_line and not self.is_run(work):  # people's refusals
                self.out.refusals["capacity" if short else "limit"] += 1
            work.due = self.now + (1 if in_line else RETRY_MINUTES) * MINUTE
            return False
        self.short.discard(work.key)
        if not self.is_run(work):
            self.out.record_wait(self.now - (work.asked or self.now), work.quota_held)
        work.asked, work.quota_held = None, False
        self.servers[work.key] = Server(
            work=work,
            user=s.user,
            key=work.key,
            gpus=len(grant.uuids),
            since=grant.since,
            limits=work.limits,
            idle_processes=s.idle_processes,
            last_activity=self.now,
        )
        if self.line is not None:
            self.line.granted(work.key, work.user_id, s.user, len(grant.uuids), self.now)
        return True

    def in_turns(self, work: Work) -> bool:
        """Whether its server may share a GPU with another person's, in turns (with
        parking: `parking.ParkingReplay`)."""
        return False

    def _resume(self, server: Server, work: Work) -> None:
        server.work, server.tab_open, server.last_activity = work, True, self.now
        server.limits, server.idle_processes = work.limits, work.session.idle_processes

    # --- 2. the hub watches ----------------------------------------------------------------
    def watch(self) -> None:
        self.idle.forget_all_but(self.servers)
        for server in list(self.servers.values()):
            segment = server.work.segment_now() if server.work else None
            server.busy = segment is not None and segment.busy
            if segment.present if segment is not None else server.tab_open:
                server.last_activity = self.now
            why = self._verdict(server)
            if why is not None:
                self.cull(server, why)

    def _verdict(self, server: Server) -> str | None:
        """Why the hub stops this server now, or None."""
        busyness = self.policy.monitor
        if busyness is not None:
            kernel = WORKING if server.busy else IDLE_WITH_KERNEL if server.idle_processes else IDLE
            active = busyness.of([kernel] * server.gpus)
            self.idle.update(server.key, active, self.now)
            if active:
                server.last_activity = self.now
            verdict = decide(
                server.key,
                server.gpus,
                server.since,
                self.idle.idle_since.get(server.key),
                server.limits.durations,
                self.now,
            )
            if verdict is not None:
                return "max_age" if "(max_age" in verdict.reason else "gpu_idle_timeout"
        if self.policy.culler:
            limit = server.limits.duration("idle_timeout" if server.gpus else "cpu_idle_timeout")
            state = {} if limit.value is None else {"idle_timeout": limit.value}
            if idle_arbiter(
                inactive=timedelta(seconds=self.now - server.last_activity),
                inactive_limit=int(self.site.culler_timeout),
                server={"state": state},
            ):
                return "idle_timeout" if state else "culler timeout"
        return None

    def cull(self, server: Server, why: str) -> None:
        self.out.culls[why] += 1
        self.stop(server)
        work = server.work
        if work is None:
            return
        if self.is_run(work):  # a training run, stopped: started again, from its start
            self.out.stopped += 1
            self.out.run_lost += work.elapsed * server.gpus
            work.elapsed, work.due = 0, self.now + RETRY_MINUTES * MINUTE
            self.asking.append(work)
            return
        segment = work.segment_now()
        work.due = self.now + (segment.minutes - work.elapsed) * MINUTE
        self.out.interrupted += 1
        if segment.busy:
            self.out.runs_killed += 1
            self.out.lost += work.elapsed * server.gpus
            work.rerun = work.segment
        else:
            work.segment += 1
        work.elapsed = 0
        if not work.finished:
            self.asking.append(work)

    def stop(self, server: Server) -> None:
        """The server ends and its container is gone: its GPUs go back, as in the hub."""
        pool = self.pools[server.user]
        pool.begin_release(server.key)
        pool.release(server.key)
        del self.servers[server.key]
        if self.line is not None:
            self.line.released(server.key, self.now)

    # --- 3. the minute is counted ----------------------------------------------------------
    def count(self) -> None:
        held, busy, wanted = self.tally()
        self.out.record(self.site.gpus if self.policy.fixed else held, busy, wanted)

    def tally(self) -> tuple[int, int, int]:
        """GPUs held and busy this minute, and GPUs people wait for."""
        held = busy = 0
        for server in self.servers.values():
            held += server.gpus
            if server.busy:
                busy += server.gpus
                if server.work and self.is_run(server.work):
                    self.out.run_busy += server.gpus
        wanted = sum(w.gpus for w in self.asking if w.asked is not None and not self.is_run(w))
        return held, busy, wanted

    # --- 4. people work ----------------------------------------------------------------------
    def works(self, server: Server) -> bool:
        """Whether its person got on with their work this minute (with parking: not while
        their server waits to be restored)."""
        return True

    def advance(self) -> None:
        for server in list(self.servers.values()):
            work = server.work
            if work is None or not self.works(server):
                continue
            work.elapsed += 1
            if work.elapsed < work.session.pattern[work.segment].minutes:
                continue
            work.segment, work.elapsed = work.segment + 1, 0
            if not work.finished:
                continue
            if self.is_run(work):
                self._done.add(work.order)
                self.out.turnarounds.append(self.now + MINUTE - self.submitted[work.order])
            then = work.session.then
            if then == "stop":
                self.stop(server)
            else:
                server.work, server.tab_open = None, then == "open"


def replay(
    sessions: list[Session],
    site: Site,
    policy: Policy,
    minutes: int | None = None,
    runs: Collection[int] = (),
) -> Outcome:
    """Replay `sessions` from midnight of the first arrival, for whole weeks (or `minutes`);
    `runs`: which of them (by index) are training runs on servers of their own."""
    start, whole = span([s.arrival for s in sessions])
    return Replay(sessions, site, policy, start, whole if minutes is None else minutes, runs).run()


def span(arrivals: Sequence[datetime]) -> tuple[datetime, int]:
    """Where a replay starts (midnight of the first arrival) and its minutes: whole weeks
    up to the last arrival."""
    start = datetime.combine(min(arrivals).date(), datetime.min.time())
    weeks = (max(arrivals) - start).days // 7 + 1
    return start, weeks * 7 * 24 * 60
