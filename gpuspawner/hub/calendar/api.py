"""The calendar's REST API: bookings and drains, in JSON (`gpuspawner calendar`, scripts).

    GET    /hub/api/gpu-calendar            the windows open now or ahead (custom:gpus:read)
    POST   /hub/api/gpu-calendar/bookings   book {"gpus": N, "start", "end"} and one of
                                            "user" or "group"; "profile" or "model" picks
                                            which GPUs; "let_finish", "note": 201, or 400
                                            with the reason (nothing is booked)
    POST   /hub/api/gpu-calendar/drains     drain {"reason"} and one of "gpus" (UUIDs),
                                            "model", "node" or "all": true; "start"
                                            (default now) (custom:gpus:admin)
    DELETE /hub/api/gpu-calendar/ID         end a window now, or cancel one ahead
                                            (admins; a user their own booking)

Who may ask is checked before anything is read or looked up, so that a stranger learns
nothing (not even whether a window exists); what a request sent is echoed back in an error
cut short (`words.quoted`, `words.listed`), however long it was.

Admins (`custom:gpus:admin`) book for anyone and drain. A user books for themselves only
where one of their groups sets `max_booking` (how much time all their own bookings may
cover together), within their `max_gpus_per_user`, and may give their own bookings back.
Times are ISO 8601; one without a zone is UTC.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from jupyterhub import orm
from jupyterhub.scopes import has_scope
from jupyterhub.utils import url_path_join
from tornado import web

from ...core.calendar import InvalidWindow, Window
from ...core.gpus import GPU
from ...core.limits import UserLimits
from ...core.units import Kind
from ...core.words import count_gpus, iso_utc, listed, quoted
from ..base import access
from ..base.answers import JSONHandler, id_in_url
from ..books.broker import Broker
from ..books.served import Route, Served, routes

BOOKING_KEYS = {"user", "group", "gpus", "profile", "model", "start", "end", "let_finish", "note"}
DRAIN_KEYS = {"gpus", "model", "node", "all", "start", "reason"}
TEXT_LIMIT = 200  # characters of a reason or a note


def window_json(window: Window, now: float) -> dict[str, Any]:
    return {
        "id": window.id,
        "kind": "drain" if window.drain else "booking",
        "state": window.state(now),
        "gpus": sorted(window.gpus),
        "start": iso_utc(window.start),
        "end": iso_utc(window.end) if math.isfinite(window.end) else None,
        "user": window.user,
        "group": window.group,
        "reason": window.reason,
        "let_finish": window.let_finish,
        "by": window.by,
        "asked": window.asked,
    }


def drain_choices(gpus: Sequence[GPU]) -> dict[str, list[str]]:
    """What the GPUs page offers to drain besides every GPU: each node, model and GPU."""
    return {
        "nodes": sorted({g.node for g in gpus if g.node}),
        "models": sorted({g.model for g in gpus}),
        "gpus": [g.uuid for g in gpus],
    }


class CalendarHandler(Served, JSONHandler):
    def _body(self, keys: set[str]) -> dict[str, Any]:
        body = self.get_json_body() or {}
        if not isinstance(body, dict):
            raise web.HTTPError(400, "The body must be a JSON object")
        unknown = sorted(set(body) - keys)
        if unknown:
            raise web.HTTPError(400, f"Unknown keys: {listed([quoted(k) for k in unknown])}")
        return body

    def _admin(self) -> bool:
        return bool(has_scope(access.ADMIN, self.parsed_scopes, db=self.db))

    def _own_login(self) -> bool:
        """A user's own login or token, one that may start and stop their servers: what
        books for them and gives their bookings back (not a service's, not a read-only
        token's)."""
        me = self.current_user
        return getattr(me, "kind", "user") == "user" and bool(
            has_scope(f"servers!user={me.name}", self.parsed_scopes, db=self.db)
        )

    def _changed(self, window: Window, status: int) -> None:
        broker = self.broker
        broker.pass_line()  # a drain ended or a booking given back frees GPUs for who waits
        self._answer(window_json(window, broker.clock()), status)


class WindowsHandler(CalendarHandler):
    def get(self) -> None:
        access.require(self, access.READ)
        broker = self.broker
        now = broker.clock()
        self._answer({"windows": [window_json(w, now) for w in broker.calendar.windows()]})


class BookingsHandler(CalendarHandler):
    def post(self) -> None:
        me = self.current_user
        if me is None:
            raise web.HTTPError(403, "Log in to book GPUs")
        broker = self.broker
        member = None  # an admin books for anyone; a member for themselves, by their limits
        if self._admin():
            access.require(self, "delete:servers")  # its window stops servers on its GPUs
        else:
            member = self._member(broker)
        body = self._body(BOOKING_KEYS)
        now = broker.clock()
        start, end = _moment(body.get("start"), "start", now), _moment(body.get("end"), "end", now)
        count = _count(body.get("gpus"), len(broker.site.gpus))
        let_finish = _flag(body, "let_finish")
        user, group = _text(body, "user"), _text(body, "group")
        longest, nodes = None, None
        if member is not None:
            self._own_booking(broker, member, body, count, start, end)
            user, group, let_finish = me.name, "", True  # a member's booking stops nobody
            longest, nodes = member.duration("max_booking").value, member.nodes.value
        if user and orm.User.find(self.db, user) is None:
            raise web.HTTPError(400, f"No such user: {quoted(user)}")
        if group and orm.Group.find(self.db, group) is None:
            raise web.HTTPError(400, f"No such group: {quoted(group)}")
        candidates, asked = _candidates(broker, body, count, nodes)
        try:
            window = broker.calendar.book(
                candidates,
                count,
                start,
                end,
                user=user,
                group=group,
                longest=longest,
                let_finish=let_finish,
                note=_text(body, "note"),
                by=me.name,
                asked=asked,
            )
        except InvalidWindow as invalid:
            raise web.HTTPError(400, str(invalid)) from None
        self.log.info("gpuspawner: %s booked %s", me.name, window)
        self._changed(window, 201)

    def _member(self, broker: Broker) -> UserLimits:
        """A user who books for themselves, before their request is read: with their own
        login or token, in a group that lets members book (`max_booking`). Their limits."""
        if not self._own_login():
            raise web.HTTPError(403, "Only a user's own login or token books GPUs for them")
        limits = broker.limits_for(self.current_user)
        if limits.duration("max_booking").value is None:
            raise web.HTTPError(
                403, "Your groups do not let members book GPUs (max_booking): ask an admin"
            )
        return limits

    def _own_booking(
        self,
        broker: Broker,
        limits: UserLimits,
        body: dict[str, Any],
        count: int,
        start: float,
        end: float,
    ) -> None:
        """What a member asks for: for themselves only, on profiles they may use, and with
        their bookings in that window within their `max_gpus_per_user` (the calendar bounds
        the time all of theirs cover, `max_booking`)."""
        me = self.current_user
        if (
            body.get("group")
            or body.get("user") not in (None, "", me.name)
            or body.get("let_finish")
        ):
            raise web.HTTPError(
                403, "Only admins book for others or for a group, or let servers finish"
            )
        profile = str(body.get("profile") or "")
        if profile and not limits.may_pick(profile):
            raise web.HTTPError(403, f"Profile {quoted(profile)} is not available to you")
        most = limits.max_gpus_per_user.value
        mine = sum(
            len(w.gpus)
            for w in broker.calendar.windows()
            if w.user == me.name and w.overlaps(start, end)
        )
        if most is not None and mine + count > most:
            raise web.HTTPError(
                400,
                f"You may hold {most} GPUs at once (max_gpus_per_user), and your bookings in "
                f"that window hold {mine}: book at most {max(0, most - mine)}",
            )


class DrainsHandler(CalendarHandler):
    def post(self) -> None:
        access.require(self, access.ADMIN)
        access.require(self, "delete:servers")  # a drain stops the servers on its GPUs
        body = self._body(DRAIN_KEYS)
        broker = self.broker
        reason = _text(body, "reason")
        if not reason:
            raise web.HTTPError(400, "A drain needs a reason: users read it")
        gpus, asked = _drained(broker, body)
        start = _moment(body.get("start", "now"), "start", broker.clock())
        try:
            window = broker.calendar.drain(gpus, start, reason, self.current_user.name, asked)
        except InvalidWindow as invalid:
            raise web.HTTPError(400, str(invalid)) from None
        self.log.warning("gpuspawner: %s drains %s: %s", self.current_user.name, asked, reason)
        self._changed(window, 201)


class WindowHandler(CalendarHandler):
    def delete(self, window_id: str) -> None:
        """Who asks is checked before the window is looked up: a stranger gets 403 whether
        it exists or not, and a user who is not an admin finds only their own bookings."""
        me = self.current_user
        if me is None:
            raise web.HTTPError(403, "Log in to end a booking or a drain")
        admin = self._admin()
        if not (admin or self._own_login()):
            raise web.HTTPError(
                403, "Only admins, or a user with their own login or token, end bookings"
            )
        broker = self.broker
        number = id_in_url(window_id, "booking or drain")
        window = next(
            (
                w
                for w in broker.calendar.windows()
                if w.id == number and (admin or w.user == me.name)
            ),
            None,
        )
        if window is None:
            mine = "booking or drain" if admin else "booking of yours"
            raise web.HTTPError(404, f"No {mine} {number} open or ahead")
        ended = broker.calendar.end(window.id)
        self.log.info("gpuspawner: %s ended %s", me.name, ended)
        self._changed(ended, 200)


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key, "")
    if not isinstance(value, str) or len(value) > TEXT_LIMIT:
        raise web.HTTPError(400, f"{key!r} must be text of at most {TEXT_LIMIT} characters")
    return " ".join(value.split())


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise web.HTTPError(400, f"{key!r} must be true or false")
    return value


def _count(value: Any, most: int) -> int:
    """A number of GPUs to book: 1 to the `most` the machine has (a larger one is echoed in
    no message)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise web.HTTPError(400, f"'gpus' must be a whole number of GPUs, from 1 to {most}")
    return value


def _moment(value: Any, key: str, now: float) -> float:
    if value == "now":
        return now
    if not isinstance(value, str):
        raise web.HTTPError(400, f"{key!r} must be an ISO 8601 time, e.g. 2026-12-10T09:00Z")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise web.HTTPError(400, f"{key!r} is not an ISO 8601 time: {quoted(value)}") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _candidates(
    broker: Broker, body: dict[str, Any], count: int, nodes: frozenset[str] | None
) -> tuple[list[str], str]:
    """The GPUs a booking may take, those free now first (a booking from now then stops no
    server where it need not), on `nodes` (None: any), and what was asked, in words."""
    site = broker.site
    profile_slug, model = _text(body, "profile"), _text(body, "model")
    if profile_slug and model:
        raise web.HTTPError(400, "Give 'profile' or 'model', not both")
    gpus = [g for g in site.gpus if not g.mig_mode and (nodes is None or g.node in nodes)]
    asked = count_gpus(count)
    if profile_slug:
        profile = next((p for p in site.profiles if p.slug == profile_slug), None)
        if profile is None or profile.request.kind is not Kind.GPU:
            raise web.HTTPError(
                400, f"No whole-GPU profile {quoted(profile_slug)}: bookings are of GPUs"
            )
        matched = {u.gpu for u in site.units if profile.request.matches(u)}
        gpus, asked = [g for g in gpus if g.uuid in matched], f"{count} × {profile_slug}"
    elif model:
        gpus, asked = [g for g in gpus if g.model.lower() == model.lower()], f"{count} × {model}"
        if not gpus:
            raise web.HTTPError(400, f"No GPU is a {quoted(model)}")
    held = {u.gpu for grant in broker.pool.grants() for u in grant.units}
    return [g.uuid for g in sorted(gpus, key=lambda g: g.uuid in held)], asked


def _drained(broker: Broker, body: dict[str, Any]) -> tuple[list[str], str]:
    """The GPUs a drain takes out, and what was asked, in words."""
    gpus = broker.site.gpus
    given = [key for key in ("gpus", "model", "node", "all") if key in body]
    if len(given) != 1:
        raise web.HTTPError(400, "Give one of 'gpus', 'model', 'node' or 'all'")
    if "gpus" in body:
        asked = body["gpus"]
        if not isinstance(asked, list) or not all(isinstance(u, str) for u in asked):
            raise web.HTTPError(400, "'gpus' must be a list of GPU UUIDs")
        asked = list(dict.fromkeys(asked))  # each once, however often it was sent
        unknown = sorted(set(asked) - {g.uuid for g in gpus})
        if unknown:
            raise web.HTTPError(400, f"No such GPU: {listed([quoted(u) for u in unknown])}")
        return asked, ", ".join(asked)  # known GPUs only, each once: as long as the machine
    if body.get("all", True) is not True:
        raise web.HTTPError(400, "'all' must be true")
    if "all" in body:
        return [g.uuid for g in gpus], "all GPUs"
    key = given[0]
    name = _text(body, key)
    if not name:
        raise web.HTTPError(400, f"{key!r} must name a {key}")
    if key == "model":
        found = [g.uuid for g in gpus if g.model.lower() == name.lower()]
    else:
        found = [g.uuid for g in gpus if g.node == name]
    if not found:
        where = "a" if key == "model" else "on node"
        raise web.HTTPError(400, f"No GPU is {where} {quoted(name)}")
    return found, f"{key} {name}"


def handlers(hub_prefix: str, broker: Broker) -> list[Route]:
    api = url_path_join(hub_prefix, "api/gpu-calendar")
    return routes(
        broker,
        (api, WindowsHandler),
        (f"{api}/bookings", BookingsHandler),
        (f"{api}/drains", DrainsHandler),
        (rf"{api}/(\d+)", WindowHandler),
    )
