"""The plan against the reference, number by number: one update's loss and
every entry's gradient, from the same parameters and the same batch."""

from __future__ import annotations

import numpy as np

from planner.runtime.session import Session
from planner.schedule.arena import entries


def plan_gradients(session: Session, ids: np.ndarray, targets: np.ndarray
                   ) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
    """Run update 0's launches up to its AdamW (which would move the
    parameters on), then read the loss rows and the gradient bank (unscaled).
    Returns the loss, each entry's gradient and the parameters they belong to."""
    plan, config = session.plan, session.config
    submission = plan.submissions[session.groups["update"][0]]
    session.set_inputs(ids, targets)
    for plane in ("input-ids", "input-targets"):
        session.device.write("staging", plan.plane[plane].offset, session.inputs[plane])
    launches = [i for i in submission.launches() if i < session.adamw[0][0]]
    session.device.run_launches(launches)
    session.device.wait()
    rows = np.frombuffer(session.device.read("staging", plan.plane["result-diagnostics"].offset,
                                             plan.plane["result-diagnostics"].offset + 4 * config.shape.tokens), "<f4")
    bank = plan.plane["parameters"].bytes
    gradients = np.frombuffer(session.device.read_arena(plan.plane["gradients"].offset, bank), "<f4")
    parameters = np.frombuffer(session.device.read_arena(plan.plane["parameters"].offset, bank), "<f4").copy()
    scale = config.learner.loss_scale
    out = {e.name: gradients[e.offset // 4:e.offset // 4 + e.elements].astype(np.float64).reshape(e.shape) / scale
           for e in entries(config)}
    return float(rows.astype(np.float64).mean()), out, parameters


def reference_gradients(config, parameters: np.ndarray, ids: np.ndarray, targets: np.ndarray, device="cpu"
                        ) -> tuple[float, dict[str, np.ndarray]]:
    """The reference's loss and gradients in float64 from the same parameters."""
    import torch

    from planner.reference.model import loss, parameters_from_bank
    params = parameters_from_bank(config, torch.from_numpy(parameters), device=device, dtype=torch.float64)
    for p in params.values():
        p.requires_grad_(True)
    value = loss(config, params, torch.from_numpy(ids).long().to(device), torch.from_numpy(targets).long().to(device))
    value.backward()
    value = value.detach()
    return value.item(), {n: p.grad.cpu().numpy() for n, p in params.items()}


def relative_errors(ours: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> dict[str, float]:
    return {n: float(np.linalg.norm(ours[n] - reference[n]) / max(np.linalg.norm(reference[n]), 1e-30))
            for n in reference}
