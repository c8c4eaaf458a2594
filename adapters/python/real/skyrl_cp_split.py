"""SkyRL's real CP split of a packed micro-batch (`preprocess_packed_seqs`,
skyrl/backends/skyrl_train/distributed/megatron/megatron_utils.py) as a `thdcheck fuzz cp-split`
adapter: each sequence's real tokens padded with 0 to a slot of `align = tp*cp*2` (`tp` at
cp 1), every slot in `2*cp` chunks, rank r keeping chunks r and 2cp-1-r of every slot
(TransformerEngine's per-slot zigzag: `--cp-layout zigzag`, thdcheck's default).

    THDCHECK_MIRRORS=/work/.mirror thdcheck fuzz cp-split --profile skyrl -- \
        python adapters/python/real/skyrl_cp_split.py COMMIT [tp=N]

(at tp=N also `--cp-slot-align N`: the profile's `[fuzz] cp_slot_align = 1` makes every
request's slots SkyRL's own round-up, which this adapter needs to hand SkyRL the request's slots)

COMMIT defaults to the corpus's a9564572e; `bcc85e241^` is SkyRL #1407's bug (a sequence shorter
than half its aligned slot makes rank `cp-1` read past its real tokens: RuntimeError), fixed at
`bcc85e241`. The file is loaded by `corpus/real/stacks/skyrl.py`'s `load` (its stubs; the real
Megatron `PackedSeqParams`), at COMMIT; before packing_utils.py existed (a9564572e has it, #1407
does not) the align is computed in megatron_utils.py itself and that file is skipped.

Translation (everything else is the real function):
- the micro-batch is what SkyRL's worker hands it (megatron_model_wrapper.py `forward`):
  `input_ids` [B, S], one row per request sequence (its slot's ids, real tokens first), and
  `attention_mask` bool [B, S], True on the real tokens only; mpu answers tp, cp and the rank
  (no process group), and the function is called once per rank, `pre_process=True`;
- SkyRL pads the slots itself, with token 0, which is no request id (they are >= 1000); each 0
  is named with the request's padding id it stands for, found by a second call of the same
  function with the whole slot unmasked (its padding ids as tokens): where that call puts a
  padding id of the request, the 0 is that padding token. Only when both calls give the same
  slots (SkyRL's `cu_seqlens_padded`); a 0 where that call puts a real token stays 0 (a lost
  token). A request slot that is not SkyRL's own round-up (a slot with a spare `2*cp` block, or
  not a multiple of `tp*cp*2`) cannot be handed to it: SkyRL answers in its own slots;
- SkyRL does not shard labels here: the targets are the full sequences (`sequences`, unpacked,
  or `packed_targets`, built unsharded from the same mask), token t of a row predicting token
  t+1 of the same row. So each local token gets its own target, the request's labels rolled
  within each sequence (examples/cp_split.py `roll`), looked up by the id it holds (-100 for
  SkyRL's padding); no position ids are answered (SkyRL passes none with packing);
- SkyRL has no refusal: it pads any length. An exception is answered as an `error` (thdcheck's
  `adapter-error`), not as a refusal of the layout.
Needs torch (not in CI).
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "corpus", "real"))

import torch  # noqa: E402

import common  # noqa: E402
import stacks.skyrl as corpus  # noqa: E402
from cp_split import roll  # noqa: E402
from thdcheck_adapter import serve  # noqa: E402

IGNORE_INDEX = -100


def load(commit, tp):
    """megatron_utils at `commit` through the corpus's loader (`stacks.skyrl.load`)."""
    corpus.COMMIT = common.full_sha(corpus.REPO, commit)
    has = subprocess.run(["git", "-C", str(common.mirror(corpus.REPO)), "cat-file", "-e",
                          f"{corpus.COMMIT}:{corpus.PACKING}"], capture_output=True).returncode == 0
    real_upstream = corpus.upstream
    if not has:  # no packing_utils.py yet at this commit: nothing to load
        corpus.upstream = lambda repo, c, path, **kw: (
            None if path == corpus.PACKING else real_upstream(repo, c, path, **kw))
    try:
        utils, _wrapper, _psp, _permissive = corpus.load(tp)
    finally:
        corpus.upstream = real_upstream
    return utils, sys.modules["megatron.core.parallel_state"]


def main():
    args = sys.argv[1:]
    commit = next((a for a in args if not a.startswith("tp=")), corpus.COMMIT)
    tp = int(next((a[3:] for a in args if a.startswith("tp=")), 1))
    utils, mpu = load(commit, tp)

    def shards(rows, masks, cp):
        width = max([len(r) for r in rows] + [1])
        input_ids = torch.zeros((len(rows), width), dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, (r, m) in enumerate(zip(rows, masks)):
            input_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            attention_mask[i, :m] = True
        out = []
        for rank in range(cp):
            mpu.get_context_parallel_world_size = lambda: cp
            mpu.get_context_parallel_rank = lambda rank=rank: rank
            tokens, p = utils.preprocess_packed_seqs(input_ids, attention_mask, pre_process=True)
            out.append((tokens[0].tolist(), p.cu_seqlens_q_padded.tolist()))
        return out

    def handler(request):
        cp = request["cp_size"]
        ids, cu, cu_pad = request["input_ids"], request["cu_seqlens"], request["cu_seqlens_padded"]
        rolled = roll(request["labels"], cu, cu_pad)
        index = {t: g for g, t in enumerate(ids)}
        lens = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
        real_ids = {ids[cu_pad[i] + j] for i, n in enumerate(lens) for j in range(n)}
        slots = [ids[cu_pad[i]: cu_pad[i + 1]] for i in range(len(cu) - 1)]
        real = shards(slots, lens, cp)  # the worker's micro-batch: the real call
        try:  # the same function on the whole slots: where each padding id goes
            probe = shards(slots, [len(s) for s in slots], cp)
        except Exception:  # noqa: BLE001 (bcc85e241^ on a short unpadded slot)
            probe = None
        ranks = []
        for r, (tokens, cu_skyrl) in enumerate(real):
            if probe is not None and probe[r][1] == cu_skyrl:
                tokens = [p if t == 0 and p in index and p not in real_ids else t
                          for t, p in zip(tokens, probe[r][0])]
            ranks.append({"input_ids": tokens,
                          "labels": [rolled[index[t]] if t in index else IGNORE_INDEX
                                     for t in tokens]})
        return {"ranks": ranks}

    serve(handler)


if __name__ == "__main__":
    main()
