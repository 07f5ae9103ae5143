"""Train the certified plan and the PyTorch reference side by side from the
same parameters on the same batches; print both loss curves, write them as
JSON and a PNG. Run on a GPU machine: python scripts/train_vs_reference.py OUT STEPS"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from planner.certify import Uncertified, demand_certificate
from planner.cli import InputError, output_directory, require_torch
from planner.data.batches import Batches
from planner.data.command import embedded
from planner.data.shards import read_dataset
from planner.model.config import DEFAULT
from planner.runtime.cuda import CudaDevice, NoDevice, open_gpu
from planner.runtime.session import Session
from planner.schedule import build_plan


def train(out: Path, steps: int) -> None:
    torch = require_torch()
    from planner.reference.model import Coppelius, optimizer, parameters_from_bank  # needs torch

    config = DEFAULT
    s = config.shape
    data = read_dataset(embedded(s.vocab), s.vocab, s.seq + 1)
    batches = Batches(data.train, s.batch, s.seq, config.run.seed)
    plan = build_plan(config)
    device = CudaDevice(plan, open_gpu(), graphs=True, certificate=demand_certificate(plan))
    session = Session(plan, device)
    session.start(batches(0)[0])
    parameters = np.frombuffer(device.read_arena(plan.plane["parameters"].offset, plan.plane["parameters"].bytes),
                               "<f4").copy()
    ours = [session.update(*batches(i)) for i in range(steps)]
    device.close()

    model = Coppelius(config, parameters_from_bank(config, torch.from_numpy(parameters), device="cuda"))
    opt = optimizer(config, model)
    theirs = []
    for i in range(steps):
        ids, targets = (torch.from_numpy(a).long().cuda() for a in batches(i))
        loss = model(ids, targets)
        loss.backward()
        opt.step()
        opt.zero_grad()
        theirs.append(loss.item())
    out.mkdir(parents=True, exist_ok=True)
    (out / "curves.json").write_text(json.dumps({"plan": ours, "reference": theirs}))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.figure(figsize=(7, 4))
    plt.plot(range(1, steps + 1), theirs, label="PyTorch reference (fp32)")
    plt.plot(range(1, steps + 1), ours, label="certified plan (binary16 products)", linestyle="--")
    plt.xlabel("update")
    plt.ylabel("training loss")
    plt.legend()
    plt.tight_layout()
    plt.savefig(out / "curves.png", dpi=120)
    print(f"{'step':>5} {'plan':>8} {'reference':>10} {'rel':>8}")
    for i in list(range(0, steps, max(1, steps // 20))) + [steps - 1]:
        print(f"{i + 1:5d} {ours[i]:8.4f} {theirs[i]:10.4f} {abs(ours[i] - theirs[i]) / theirs[i]:8.2e}")
    last = min(20, steps)
    print(f"mean of the last {last}: plan {np.mean(ours[-last:]):.4f} reference {np.mean(theirs[-last:]):.4f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the directory for curves.json and curves.png")
    parser.add_argument("steps", type=int, help="updates each side trains")
    args = parser.parse_args()
    try:
        if args.steps < 1:
            raise InputError(f"steps {args.steps}: at least one update")
        output_directory(args.out, "the output directory")
        train(args.out, args.steps)
    except (InputError, NoDevice) as error:
        print(f"train_vs_reference: {error}", file=sys.stderr)
        return 2
    except Uncertified as error:
        print(f"train_vs_reference: refused: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
