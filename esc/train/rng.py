"""Random states in checkpoints, so that a run killed and rerun draws what an uninterrupted run draws.

LoRA dropout draws from torch's generator (CUDA's on a GPU). Between two training steps other code
draws from the same generators: a DataLoader takes its workers' base seed from it whenever an epoch
starts (also the resumed run's first, after the checkpoint was loaded), and so does validation's. A
state saved at a step's end and restored at once would be shifted by those draws, which an
uninterrupted run makes at other moments. `TrainingRandomness` therefore keeps the training steps'
stream apart: swapped in when a step starts, out when it ends; checkpoints carry that stream.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)

CHECKPOINT_KEY = "rng_states"  # in every checkpoint: a list of `collect_states()`, one per rank


def collect_states() -> dict[str, Any]:
    """This process's Python, NumPy, torch and CUDA random states, in types that
    `torch.load(weights_only=True)` reads back (no NumPy arrays)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": keys.tolist(), "pos": pos, "has_gauss": has_gauss, "gauss": gauss},
        "torch": torch.get_rng_state(),
        "torch.cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_states(states: Mapping[str, Any]) -> None:
    """Set this process's random states to what `collect_states` returned."""
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    n = states["numpy"]
    keys = np.asarray(n["keys"], dtype=np.uint32)
    np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(states["torch"].cpu())
    if torch.cuda.is_available():
        for device, state in enumerate(states["torch.cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(state.cpu(), device)


def gather_states(states: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's `states`, in rank order (a collective under torch.distributed; else `[states]`).

    Called where Lightning builds a checkpoint, which every rank does (rank zero writes it)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [states]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, states)
    return gathered


def states_for_rank(saved: Sequence[dict[str, Any]] | None, rank: int, world_size: int) -> dict | None:
    """This rank's states from a checkpoint's list; None (with a warning) where there are none to use."""
    if not saved:
        log.warning(
            "resume: the checkpoint holds no random states (written by an older version): dropout "
            "continues from the seed, so the losses will differ from an uninterrupted run's"
        )
        return None
    if len(saved) != world_size:
        log.warning(
            "resume: the checkpoint holds the random states of %d processes and this run has %d: "
            "dropout continues from the seed, so the losses will differ from an uninterrupted run's",
            len(saved),
            world_size,
        )
        return None
    return saved[rank]


class TrainingRandomness:
    """The random stream of training steps, kept apart from what other code draws between steps.

    `step_starts` puts the stream in place of the process's states (keeping those) and `step_ends`
    takes it out again. A fresh run's stream begins with the process's states at its first step; a
    resumed run's is the checkpoint's (`resume`).
    """

    def __init__(self) -> None:
        self._stream: dict[str, Any] | None = None  # the stream between two steps
        self._outside: dict[str, Any] | None = None  # everything else's states, during a step

    def step_starts(self) -> None:
        self._outside = collect_states()
        if self._stream is not None:
            restore_states(self._stream)

    def step_ends(self) -> None:
        self._stream = collect_states()
        if self._outside is not None:
            restore_states(self._outside)
            self._outside = None

    def current(self) -> dict[str, Any]:
        """The stream as a checkpoint written now must hold it.

        During a step (Lightning writes `every_n_train_steps` checkpoints at the step's batch end,
        before `step_ends`): the live states, i.e. after everything the step drew. Between steps:
        the stream as the last step left it. Before any step: the process's states.
        """
        if self._outside is not None or self._stream is None:
            return collect_states()
        return self._stream

    def resume(self, states: dict[str, Any] | None) -> None:
        """Continue from a checkpoint's stream (None: from the process's states at the next step)."""
        self._stream = states
