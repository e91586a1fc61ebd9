"""A stand-in for Hugging Face transformers, for CTest's bench.generate_peer_protocol only (never a
benchmark peer: it generates nothing real). With PYTHONPATH=bench/smoke_peers, bench/generate_hf.py
imports this instead of transformers, so that bench_generate's alternation with its peer (one
`generate_hf.py --serve` process per batch size, bench_common.h's PeerProcess and
bench/step_protocol.py) runs on a machine without bench/setup_peers.sh's environment: a broken
protocol shows there, not first in a long run with the real peer. Needs torch (any version).
"""
import torch

__version__ = "stub (bench/smoke_peers/transformers.py, not transformers)"


class logging:  # noqa: N801 (transformers' module name)
    @staticmethod
    def set_verbosity_error():
        pass


class GPT2Config:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class GPT2LMHeadModel(torch.nn.Module):
    """generate() appends max_new_tokens copies of the pad id: the shape generate_hf.py checks."""

    def __init__(self, config):
        super().__init__()
        self.config = config

    def generate(self, ids, attention_mask=None, do_sample=False, max_new_tokens=0, min_new_tokens=0,
                 pad_token_id=0):
        assert min_new_tokens == max_new_tokens and not do_sample
        return torch.cat([ids, torch.full((ids.shape[0], max_new_tokens), pad_token_id, dtype=ids.dtype)], dim=1)
