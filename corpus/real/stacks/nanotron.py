"""huggingface/nanotron: `DataCollatorForCLMWithPositionIds.__call__`
(src/nanotron/data/clm_collator.py) at main 2411b022a (the latest commit; the last release, v0.5,
predates the collator), with the real `TensorPointer`.

How nanotron feeds it: `build_data_loader` (data/dataloader_builder.py) uses this collator when
`use_position_ids` (the default) with `use_doc_masking` (default True); the items come from the
Nanoset / datatrove `DatatroveFolderDataset(return_positions=True, eos_token_id=...)`: windows of
`sequence_length + 1` token ids of the tokenized stream and `positions` that restart after every
EOS token and at the window start (data/nanoset.py: "the position ids are directly build
datatrove"; datatrove src/datatrove/utils/dataset.py `_get_positions_from_tokens`, run here at
a649de79c to make the items' positions).

Contract (clm_collator.py, 2411b022a):
- `input_ids = ids[:, :-1]`, `position_ids = positions[:, :-1]` (with `use_doc_masking`; else
  `arange(sequence_length)` per row); `label_ids = ids[:, 1:]`: **shifted** labels, no -100 ever;
- `label_mask` [B, S] bool: True everywhere except where the *next* position id is 0, i.e. the
  last token of each document (its EOS) does not predict the next document's first token (doc
  masking, the comment's "label_id for 0 is 1780 -> need to mask 1780"); without doc masking all
  True (plain pretraining over the whole window);
- context parallelism: each CP rank keeps the **contiguous** slice `[r*S/cp, (r+1)*S/cp)` of
  input_ids, label_ids and label_mask, while `position_ids` stay global (full length,
  `cp_return_global_position_ids=True` since 7bc99232) so the attention can find the documents;
- the values are numpy arrays (the cast to torch is commented out); saved as torch tensors.
The model (models/qwen.py, llama.py) reads `position_ids` (documents where they restart) and the
loss is `masked_mean(loss, label_mask)`.

Every case is read under the built-in `nanotron` profile (`label_ids` the labels, the separate
bool `label_mask` their loss mask, pretraining, contiguous CP); the CP rank files are contiguous
slices of each row beside the global `position_ids` of the rows, reassembled row by row. No bug with a fix touching the collator's
layout was found (#339 / 37cc8b0c fixed an UnboundLocalError of `cp_rank` in DataCollatorForCLM).
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np

from common import permissive_stub, save_case, stub, upstream

REPO = "huggingface/nanotron"
STACK = "nanotron"
COMMIT = "2411b022a75fb7f7561a1bb4166706da5e1b76de"
FILE = "src/nanotron/data/clm_collator.py"
EOS = 2


def load(cp_rank):
    for name in ("nanotron", "nanotron.parallel", "nanotron.parallel.pipeline_parallel"):
        mod = stub(name)
        mod.__path__ = []
        sys.modules[name] = mod
    pgs = {"pp": 0, "cp": cp_rank}
    dist = stub("nanotron.distributed", get_rank=lambda pg: pgs[pg])
    sys.modules["nanotron.distributed"] = dist
    sys.modules["nanotron"].distributed = dist
    sys.modules["nanotron.parallel.context"] = stub("nanotron.parallel.context",
                                                    ParallelContext=SimpleNamespace)
    upstream(REPO, COMMIT, "src/nanotron/parallel/pipeline_parallel/tensor_pointer.py",
             name="nanotron.parallel.pipeline_parallel.tensor_pointer")
    return upstream(REPO, COMMIT, FILE, name="nanotron.data.clm_collator")


DATATROVE = ("huggingface/datatrove", "a649de79c14a550dc90f48a15c025f2dd3fd3b57",
             "src/datatrove/utils/dataset.py")


def positions(window):
    """The window's position ids from datatrove's real
    `DatatroveFileDataset._get_positions_from_tokens` (restart after every EOS; the window's
    first position is 0), as `positions_from_eos_token_id=EOS` gives them."""
    import torch

    if "datatrove_utils_dataset" not in sys.modules:
        permissive_stub("loguru", "datatrove")
        sys.modules["datatrove.utils._import_utils"] = stub(
            "datatrove.utils._import_utils", is_torch_available=lambda: True,
            is_fasteners_available=lambda: False)
        upstream(*DATATROVE, name="datatrove_utils_dataset")
    mod = sys.modules["datatrove_utils_dataset"]
    self = SimpleNamespace(positions_from_eos_token_id=EOS)
    return mod.DatatroveFileDataset._get_positions_from_tokens(
        self, torch.tensor(window, dtype=torch.int64)).tolist()


def run(case, stream, *, seq, rows, cp=1, doc_masking=True, why, notes="", pending):
    import torch

    items = []
    for r in range(rows):
        w = stream[r * seq:(r + 1) * seq + 1]
        items.append({"input_ids": np.array(w, dtype=np.int64),
                      "positions": np.array(positions(w), dtype=np.int64)})
    for rank in range(cp):
        mod = load(rank)
        ctx = SimpleNamespace(pp_pg="pp", cp_pg="cp", context_parallel_size=cp)
        coll = mod.DataCollatorForCLMWithPositionIds(sequence_length=seq, input_pp_rank=0,
                                                     output_pp_rank=0, parallel_context=ctx,
                                                     use_doc_masking=doc_masking)
        out = coll([dict(i) for i in items])
        batch = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in out.items()}
        meta = {"causal": "true", "labels": "shifted", "profile": "nanotron"}
        name = case
        if cp > 1:
            meta.update(cp_size=cp, cp_rank=rank)
            name = f"{case}/rank{rank}"
        save_case(STACK, name, batch, repo=REPO, commit=COMMIT, file=FILE,
                  function=f"DataCollatorForCLMWithPositionIds(sequence_length={seq}, "
                           f"input_pp_rank=0, output_pp_rank=0, use_doc_masking={doc_masking})"
                           f".__call__(items)" + (f" on CP rank {rank} of {cp}" if cp > 1 else ""),
                  input={"items": [{k: v.tolist() for k, v in i.items()} for i in items]},
                  expected="pass", why=why, metadata=meta,
                  notes="The collator returns numpy arrays; saved as torch tensors. " + notes,
                  stubs=["nanotron.distributed.get_rank: pp rank 0, cp rank as configured",
                         "ParallelContext -> a namespace (pp_pg, cp_pg, context_parallel_size)",
                         "items: windows of seq+1 ids; positions from datatrove's real "
                         "DatatroveFileDataset._get_positions_from_tokens (huggingface/datatrove "
                         "a649de79c, src/datatrove/utils/dataset.py; loguru and the other datatrove "
                         "modules permissive stand-ins, is_torch_available -> True)"],
                  pending=pending)


def generate() -> None:
    E = EOS
    stream = [11, 12, 13, E, 21, 22, 23, 24,
              25, E, 31, 32, E, 41, 42, 43,
              44]
    run("doc_masking", stream, seq=8, rows=2, pending=None,
        why="Two windows of 9 ids (sequence_length 8) of a stream of EOS-terminated documents: "
            "row 0 [11 12 13 E | 21 22 23 24] (positions [0,1,2,3,0,1,2,3]), row 1 "
            "[25 E | 31 32 E | 41 42 43] (positions [0,1,0,1,2,0,1,2]: it starts inside the "
            "document that row 0 ends in, as a segment of its own). label_ids are the next ids; label_mask is False only "
            "at each EOS that a new document follows (row 0 index 3, row 1 indices 1 and 4), so "
            "no document predicts the next one's first token; the row-end tokens predict the "
            "true next token of their document (24 -> 25, 43 -> 44). Valid.",
        notes="Row 1's first segment continues row 0's last document; datatrove restarts the "
              "positions at every window start ('First position should be 0').")
    run("no_doc_masking", stream, seq=8, rows=2, doc_masking=False, pending=None,
        why="use_doc_masking=False (plain pretraining): position_ids arange(8) per row, "
            "label_mask all True: each window is one sequence trained across its documents, "
            "every EOS predicting the next document's first token (objective pretrain). Valid.")
    run("doc_masking_cp2", stream, seq=8, rows=2, cp=2, pending=None,
        why="The doc-masking batch with context parallelism 2: each rank keeps the contiguous "
            "half of input_ids, label_ids and label_mask, and the full global position_ids "
            "(cp_return_global_position_ids, default True since 7bc99232), from which the "
            "attention derives the document boundaries. Valid by nanotron's design.")
