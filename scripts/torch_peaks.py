"""PyTorch's peak memory training the reference model (bf16 autocast, SDPA,
fused AdamW) for configurations, as {name: bytes} JSON for
`planner place --table --peaks FILE`. Run on a GPU machine:
python scripts/torch_peaks.py OUT.json"""

from __future__ import annotations

import argparse
import json
import sys

from planner.cli import InputError, output_file, require_torch
from planner.files import written_whole


def peak(config) -> int:
    torch = require_torch()

    from planner.reference.model import Coppelius, optimizer
    from planner.schedule.arena import entries

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    params = {e.name: (torch.randn(e.shape, device="cuda") * 0.02 if e.is_matrix
                       else torch.ones(e.shape, device="cuda") if e.is_gain else torch.zeros(e.shape, device="cuda"))
              for e in entries(config)}
    model = Coppelius(config, params)
    opt = optimizer(config, model, fused=True)
    s = config.shape
    ids = torch.randint(0, s.vocab, (s.batch, s.seq), device="cuda")
    for _ in range(3):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, ids)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
    torch.cuda.synchronize()
    out = torch.cuda.max_memory_allocated()
    del model, opt, params
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the JSON file to write")
    args = parser.parse_args()
    try:
        path = output_file(args.out, "OUT")
        if not require_torch().cuda.is_available():
            raise InputError("no NVIDIA GPU for PyTorch to run on")
    except InputError as error:
        print(f"torch_peaks: {error}", file=sys.stderr)
        return 2
    from planner.place.table import CONFIGS
    peaks = {name: peak(c) for name, c in CONFIGS.items()}
    with written_whole(path, "w") as f:
        json.dump(peaks, f)
    print(json.dumps(peaks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
