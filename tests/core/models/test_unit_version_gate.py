"""The gate of a model version (naiad.models.gate): what it admits, when it is empty, and
an ensemble step that finds its model's version retired since it looked it up."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
from test_unit_ensemble_plan import ensemble, step, steps
from test_unit_ensemble_scheduler import WAIT_S, Elementwise, loop, models, request_of

from naiad.models.gate import VersionGate

__all__ = ["loop", "models"]  # fixtures used below


def test_a_gate_admits_until_it_closes_and_counts_who_is_inside():
    gate = VersionGate()
    assert gate.enter() and gate.enter()
    assert gate.inside == 2 and gate.is_open
    gate.leave()
    gate.close(was_latest=True)
    assert not gate.enter()  # refused: nothing counted
    assert gate.inside == 1 and not gate.is_open and gate.was_latest


async def test_emptied_waits_for_every_request_that_entered():
    gate = VersionGate()
    assert gate.enter()
    gate.close(was_latest=False)
    emptied = asyncio.ensure_future(gate.emptied())
    for _ in range(3):
        await asyncio.sleep(0)
    assert not emptied.done()  # one request is still inside
    # It leaves from another thread, as a request finishing on an instance thread does.
    leaver = threading.Thread(target=gate.leave)
    leaver.start()
    await asyncio.wait_for(emptied, WAIT_S)
    leaver.join(WAIT_S)
    assert gate.inside == 0


async def test_an_empty_closed_gate_is_emptied_at_once():
    gate = VersionGate()
    gate.close(was_latest=False)
    await asyncio.wait_for(gate.emptied(), WAIT_S)


def test_an_ensemble_step_goes_to_the_version_serving_in_place_of_a_retired_one(models):
    models.add("first", Elementwise(lambda x: x + 1))
    retired = models.served["first"]
    models.add("first", Elementwise(lambda x: x + 100))  # the version that replaced it
    current = models.served["first"]
    lookups = []
    at_load: list[int] = []  # how many lookups the ensemble's load made

    def lookup(name: str, version: str):
        # The first lookup of the request still finds the retired version: it retired
        # between the lookup and the step's submission.
        lookups.append(name)
        return retired if at_load and len(lookups) == at_load[0] + 1 else current

    models.lookup = lookup  # the ensemble looks steps up through it
    scheduler = models.ensemble(ensemble("X:FP32", "Z:FP32",
                                         steps(step("first", {"IN": "X"}, {"OUT": "Z"}))))
    at_load.append(len(lookups))
    assert at_load[0] >= 1  # the load's checks
    retired.gate.close(was_latest=True)
    x = np.arange(4, dtype=np.float32)
    response = scheduler.submit(request_of(x)).result(WAIT_S)
    assert response.error is None
    np.testing.assert_array_equal(response.outputs[0].data, x + 100)
    assert len(lookups) == at_load[0] + 2  # looked up again once the retired gate refused it
    assert retired.gate.inside == 0 and current.gate.inside == 0  # entered, then left
