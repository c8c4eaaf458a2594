"""Megatron-LM's real CP split (`get_batch_on_this_cp_rank`, megatron/core/utils.py) as a
`thdcheck fuzz cp-split` adapter, on its pretraining path with inter-document masking
(`use_per_sequence_balancing=True`, what `pretrain_gpt.get_batch` passes when not SFT): the
whole `[1, T]` row in `2*cp` chunks, rank r keeping chunks r and 2cp-1-r.

    thdcheck fuzz cp-split --profile megatron_lm -- \
        python adapters/python/real/megatron_lm_cp_split.py [COMMIT]

COMMIT defaults to `core_v0.19.0` (the corpus's, `corpus/real/stacks/megatron_lm.py`); the file
is read from a mirror (THDCHECK_MIRRORS), never copied. The adapter only builds the batch the
function is handed: `tokens`, `labels` rolled within each document before the split (the
fuzzer's contract; Megatron's own pretraining labels run across documents, which the split does
not look at), `loss_mask` and `position_ids` as `[1, T]` tensors and the global `cu_seqlens`;
`torch.distributed.get_world_size` / `get_rank` answer the CP size and rank (no process group).
A pack that is not a multiple of `2*cp` fails in the function's own `view` (a refusal). Needs
torch (not in CI).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "corpus", "real"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from common import permissive_stub, upstream  # noqa: E402
from cp_split import roll  # noqa: E402
from thdcheck_adapter import serve_cp_split  # noqa: E402

REPO = "NVIDIA/Megatron-LM"
UTILS = "megatron/core/utils.py"


def main():
    commit = sys.argv[1] if len(sys.argv) > 1 else "core_v0.19.0"
    permissive_stub("megatron", "transformer_engine", "transformer_engine_torch")
    utils = upstream(REPO, commit, UTILS, name="mlm_core_utils_cp_split")

    def split(batch, cp):
        rolled = roll(batch["labels"], batch["cu_seqlens"], batch["cu_seqlens_padded"])
        row = lambda xs: torch.tensor([xs], dtype=torch.int64)  # noqa: E731
        ranks = []
        orig = dist.get_world_size, dist.get_rank
        try:
            for r in range(cp):
                dist.get_world_size = lambda group=None: cp
                dist.get_rank = lambda group=None, r=r: r
                shard = utils.get_batch_on_this_cp_rank(
                    {
                        "tokens": row(batch["input_ids"]),
                        "labels": row(rolled),
                        "loss_mask": row([float(y != -100) for y in rolled]).float(),
                        "position_ids": row(batch["position_ids"]),
                        "cu_seqlens": torch.tensor(batch["cu_seqlens_padded"], dtype=torch.int32),
                    },
                    is_hybrid_cp=False,
                    cp_group=None,
                    use_per_sequence_balancing=True,
                )
                ranks.append(
                    {
                        "input_ids": shard["tokens"][0].tolist(),
                        "labels": shard["labels"][0].tolist(),
                        "position_ids": shard["position_ids"][0].tolist(),
                    }
                )
        finally:
            dist.get_world_size, dist.get_rank = orig
        return ranks

    serve_cp_split(split)


if __name__ == "__main__":
    main()
