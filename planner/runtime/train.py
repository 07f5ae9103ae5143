"""`planner train`: certify the plan, then run it.

The plan is built and certified first; an uncertified plan is refused and
nothing is allocated (no flag turns that off). Then the images are compiled,
the arena and the staging window allocated, and the session walks the run:
the prefix (a fresh model or `--resume`), `--steps` updates in invocations of
the plan's update pieces, between invocations a validation loss (the mean
over the same `--validation-batches` batches each time) every
`--validate-every` updates and a checkpoint every `--checkpoint-every`, the
final forward, the last checkpoint, the report. Ctrl-C finishes the
invocation in flight, saves, and exits cleanly. A loss that stops being
finite stops the run (exit status 1): with a fixed loss scale nothing brings
it back, and banks holding such values are never saved.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from pathlib import Path

from planner.cli import LAYOUTS
from planner.data.batches import Batches, DataError
from planner.model.config import Config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="configuration JSON (default: the embedded default)")
    p.add_argument("--steps", type=int, default=None,
                   help="updates to run, a multiple of run.update_pieces (default: 20 invocations)")
    p.add_argument("--data", metavar="DIR", help="llm.c or nanoGPT token shards (default: the embedded corpus)")
    p.add_argument("--out", metavar="DIR", default="run", help="checkpoint, metrics and plot (default: run)")
    p.add_argument("--resume", metavar="CHECKPOINT", help="continue from a checkpoint, bit for bit")
    p.add_argument("--validate-every", type=int, default=0, metavar="N",
                   help="validation loss every N updates (a multiple of run.update_pieces; 0: at the end)")
    p.add_argument("--validation-batches", type=int, default=8, metavar="N",
                   help="the validation loss is the mean over these N batches, the same each time (default 8)")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="save the checkpoint every N updates (a multiple of run.update_pieces; 0: at the end)")
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                   help="gpu (the default), or cpu: the numpy references, for small shapes")
    p.add_argument("--no-graphs", action="store_true", help="issue launches one by one instead of CUDA graphs")
    p.add_argument("--layout", choices=LAYOUTS, default="seed",
                   help="the seed's arena layout (default) or one placed from launch-level liveness")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


class _Interrupt:
    """Ctrl-C asks the loop to stop at the next point the run may stop at."""

    def __init__(self) -> None:
        self.asked = False

    def __enter__(self) -> "_Interrupt":
        self.previous = signal.signal(signal.SIGINT, self._ask)
        return self

    def _ask(self, signum, frame) -> None:
        if self.asked:                       # a second Ctrl-C stops at once
            raise KeyboardInterrupt
        self.asked = True

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGINT, self.previous)


class Diverged(Exception):
    """A loss that is not finite: the run stops, and saves nothing it holds."""


def _finite(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise Diverged(f"{what} is {value}")
    return value


def _fail(message: str) -> int:
    print(f"planner train: {message}", file=sys.stderr)
    return 2


def _multiple(flag: str, value: int, pieces: int, allow_zero: bool) -> str | None:
    if value < 0 or (value == 0 and not allow_zero) or value % pieces:
        return (f"{flag} {value}: must be a {'non-negative' if allow_zero else 'positive'} multiple of "
                f"run.update_pieces ({pieces}), the updates one invocation makes")
    return None


def run(args: argparse.Namespace) -> int:
    from planner.certify import demand_certificate
    from planner.certify.proofs import Uncertified
    from planner.cli import build, output_directory, read_config
    from planner.runtime import checkpoint as ckpt
    from planner.runtime.executor import RunError
    from planner.runtime.session import Session

    config: Config = read_config(args.config)
    out = output_directory(Path(args.out), "--out")
    pieces = config.run.update_pieces
    steps = args.steps if args.steps is not None else 20 * pieces
    for flag, value, zero in (("--steps", steps, False), ("--validate-every", args.validate_every, True),
                              ("--checkpoint-every", args.checkpoint_every, True)):
        if problem := _multiple(flag, value, pieces, zero):
            return _fail(problem)
    if args.validation_batches < 1:
        return _fail(f"--validation-batches {args.validation_batches}: must be at least 1")
    resumed = None
    if args.resume:
        try:
            resumed = ckpt.load(Path(args.resume), config)
        except ckpt.CheckpointError as error:
            return _fail(str(error))
        if resumed.step % pieces:  # planner saves only between invocations
            return _fail(f"checkpoint {args.resume}: taken after update {resumed.step}, not between invocations "
                         f"(a multiple of run.update_pieces, {pieces})")
    try:
        from planner.data.command import embedded
        from planner.data.shards import read_dataset
        shape = config.shape
        directory = Path(args.data) if args.data else embedded(shape.vocab)
        data = read_dataset(directory, shape.vocab, needed=shape.seq + 1)
        batches = Batches(data.train, shape.batch, shape.seq, config.run.seed)
        validation = Batches(data.validation, shape.batch, shape.seq, config.run.seed + 1)
    except DataError as error:
        return _fail(str(error))
    if resumed and resumed.tokenizer_digest and data.tokenizer and resumed.tokenizer_digest != data.tokenizer:
        return _fail(f"checkpoint {args.resume}: trained on tokens of another tokenizer than {directory}'s "
                     f"(SHA-256 {resumed.tokenizer_digest[:16]}, not {data.tokenizer[:16]})")

    plan = build(config, args.layout)
    try:
        certificate = demand_certificate(plan)
    except Uncertified as error:
        hint = " (`planner certify` says why; `--layout placed` places the arena for this shape)" \
            if args.layout == "seed" else " (`planner certify --layout placed` says why)"
        print(f"planner train: refused: {error}{hint}", file=sys.stderr)
        return 1
    print(f"plan {plan.digest[:16]} certified ({certificate.summary()})")
    device = _device(args, plan, certificate)
    if isinstance(device, int):
        return device
    out.mkdir(parents=True, exist_ok=True)
    checkpoint_path = out / "checkpoint.safetensors"
    first = resumed.step if resumed else 0
    saved = None                  # the update after which this run last saved
    history: list[dict] = []
    try:
        session = Session(plan, device)

        def validation_loss(after: int) -> float:
            # the same batches every time, so that the losses of one run compare
            losses = [session.evaluate(*validation(k)) for k in range(args.validation_batches)]
            return _finite(sum(losses) / len(losses), f"the validation loss after update {after}")

        session.start(validation(0)[0], checkpoint=resumed.banks if resumed else None, step=first)
        with open(out / "metrics.jsonl", "a") as metrics, _Interrupt() as interrupt, _progress(args, steps) as bar:
            def record(line: dict) -> None:
                history.append(line)
                metrics.write(json.dumps(line) + "\n")
                metrics.flush()

            began = time.perf_counter()
            done = first
            while done < first + steps:
                tick = time.perf_counter()
                loss = _finite(session.update(*batches(done)), f"the loss of update {done + 1}")
                done += 1
                rate = shape.tokens / (time.perf_counter() - tick)
                record({"step": done, "loss": loss, "tokens_per_s": rate})
                bar(done - first, loss, rate)
                if done % pieces or done == first + steps:
                    continue          # only between invocations; the last ends with the final evaluation
                if args.validate_every and done % args.validate_every == 0:
                    record({"step": done, "validation_loss": validation_loss(done)})
                stop = interrupt.asked
                if (args.checkpoint_every and done % args.checkpoint_every == 0) or stop:
                    ckpt.save(checkpoint_path, ckpt.Checkpoint(done, config, session.save(), plan.digest, data.tokenizer))
                    saved = done
                if stop:
                    print(f"\ninterrupted: checkpoint after update {done} in {checkpoint_path}")
                    return 0
            final_validation = validation_loss(done)
            record({"step": done, "validation_loss": final_validation})
            report, banks = session.finish(validation(0)[0])
            ckpt.save(checkpoint_path, ckpt.Checkpoint(done, config, banks, plan.digest, data.tokenizer))
        seconds = time.perf_counter() - began
        _plot(history, out / "loss.png")
        print(f"done: {steps} updates in {seconds:.1f} s ({steps * shape.tokens / seconds:,.0f} tokens/s); "
              f"validation loss {final_validation:.4f}; checkpoint {checkpoint_path}; plot {out / 'loss.png'}")
    except RunError as error:
        return _fail(str(error))
    except (Diverged, ckpt.CheckpointError) as error:
        kept = f"the last checkpoint saved, after update {saved}, is {checkpoint_path}" if saved is not None \
            else "this run saved no checkpoint"
        print(f"planner train: the run diverged: {error} (a smaller learner.learning_rate or "
              f"learner.loss_scale may hold it); {kept}", file=sys.stderr)
        return 1
    finally:
        close = getattr(device, "close", None)
        if close:
            close()
    return 0


class _progress:
    """A rich progress bar: step, loss, tokens/s, ETA (or nothing, --quiet)."""

    def __init__(self, args: argparse.Namespace, total: int):
        self.quiet, self.total = args.quiet or not sys.stdout.isatty(), total

    def __enter__(self):
        if self.quiet:
            return self._line
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        self.progress = Progress(TextColumn("step"), MofNCompleteColumn(), BarColumn(),
                                 TextColumn("loss {task.fields[loss]:.4f}  {task.fields[rate]:,.0f} tokens/s"),
                                 TimeRemainingColumn())
        self.progress.__enter__()
        self.task = self.progress.add_task("train", total=self.total, loss=float("nan"), rate=0.0)
        return self._bar

    def _bar(self, done: int, loss: float, rate: float) -> None:
        self.progress.update(self.task, completed=done, loss=loss, rate=rate)

    def _line(self, done: int, loss: float, rate: float) -> None:
        print(f"step {done:6d}/{self.total}  loss {loss:.4f}  {rate:,.0f} tokens/s", flush=True)

    def __exit__(self, *exc) -> None:
        if not self.quiet:
            self.progress.__exit__(*exc)


def _plot(history: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    train = [(h["step"], h["loss"]) for h in history if "loss" in h]
    valid = [(h["step"], h["validation_loss"]) for h in history if "validation_loss" in h]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train), label="training loss", linewidth=0.8)
    if valid:
        ax.plot(*zip(*valid), "o-", label="validation loss")
    ax.set_xlabel("update")
    ax.set_ylabel("loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _device(args: argparse.Namespace, plan, certificate):
    if args.device == "cpu":
        from planner.runtime.cpu import CpuDevice
        return CpuDevice(plan)
    from planner.certify.proofs import Uncertified
    from planner.runtime.cuda import CudaDevice, NoDevice, open_gpu
    try:
        gpu = open_gpu()
    except NoDevice as error:
        return _fail(str(error))
    try:
        return CudaDevice(plan, gpu, graphs=not args.no_graphs, certificate=certificate)
    except NoDevice as error:
        return _fail(str(error))
    except Uncertified as error:   # a card whose machine code the certificate does not attest
        print(f"planner train: refused: {error}", file=sys.stderr)
        return 1
