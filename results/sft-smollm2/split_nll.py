"""Held-out expert NLL split into action-word ids vs other ids, for base and SFT models."""

import functools
import json
import sys

import torch

from agentrl.algos.losses import token_logprobs_from_logits
from agentrl.envs import make
from agentrl.rollout.models import load_model, load_tokenizer, resolve_model
from agentrl.sft.data import expert_trajectories
from agentrl.sft.expert import get_expert
from agentrl.train.batch import micro_batches, to_batch

torch.set_num_threads(1)
models = sys.argv[1:]
tok = load_tokenizer(str(resolve_model(models[0])))
trajs = expert_trajectories(
    functools.partial(make, "sokoban"),
    tok,
    range(5000, 5032),
    get_expert("solver"),
    env_name="sokoban",
)
batch = to_batch(trajs, pad_id=tok.pad_token_id or 0)
words = {"up", "down", "left", "right"}
out = {}
for m in models:
    model = load_model(str(resolve_model(m)), dtype="float32").eval()
    s = {"action": [0.0, 0], "other": [0.0, 0]}
    with torch.no_grad():
        for mb in micro_batches(batch, 4096):
            logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]
            tgt = mb.input_ids[:, 1:]
            lp = token_logprobs_from_logits(logits, tgt)
            mask = mb.loss_mask[:, 1:]
            for i, j in (mask > 0).nonzero().tolist():
                k = "action" if tok.decode([tgt[i, j]]).strip().lower() in words else "other"
                s[k][0] -= float(lp[i, j])
                s[k][1] += 1
    out[m] = {k: {"nll": v[0] / max(v[1], 1), "ids": v[1]} for k, v in s.items()}
    print(m, json.dumps(out[m]), flush=True)
json.dump(out, open("split_nll.json", "w"), indent=2)
