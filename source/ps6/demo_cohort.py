"""The demo cohort's ps6 code, by persona and solution cell: reference solutions with small
changes, so instructor side only (grader/cohort/demo.py: each persona, and why this file is here)."""

_PS6_ATTENTION = '''
    def __init__(self):
        super().__init__()
        shape = (LAYERS, MAX_BATCH, HEADS, MAX_SEQ, HEAD_DIM)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)

    def forward(self, tokens, pos):
        x = (self.emb(tokens) + self.pos(pos))[:, None]
        visible = torch.arange(MAX_SEQ, device=tokens.device) <= pos
        for i, blk in enumerate(self.blocks):
            B = x.shape[0]
            q, k, v = blk.qkv(blk.ln1(x)).split(DIM, dim=-1)
            q, k, v = (t.view(B, 1, HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v))
            self.k_cache[i].index_copy_(2, pos.view(1), k)
            self.v_cache[i].index_copy_(2, pos.view(1), v)
            ATTEND
            x = x + blk.proj((att @ values).transpose(1, 2).reshape(B, 1, DIM))
            x = x + self.mlp(blk, x)
        return self.head(self.ln(x[:, 0]))
'''
DEMO_SOLUTIONS = {
    # A cache, but sliced to the positions so far: `int(pos)` stops the graph (and the slice's
    # shape grows every step). Right logits, not one graph.
    "partial": {"ps6-q1-solution": "class CachedGPT(TinyGPT):" + _PS6_ATTENTION.replace(
        "ATTEND", "n = int(pos) + 1\n"
        "            keys, values = self.k_cache[i, :, :, :n], self.v_cache[i, :, :, :n]\n"
        "            att = softmax_last((q @ keys.transpose(-2, -1)) / math.sqrt(HEAD_DIM))")},
    # One graph, no recompiles, right logits, but no cache: every step recomputes all MAX_SEQ
    # positions of the tokens so far (masked), so it is no faster than the baseline.
    "slow": {"ps6-q1-solution": '''class CachedGPT(TinyGPT):
    def forward(self, tokens, pos):
        self.history.index_copy_(1, pos.view(1), tokens[:, None])
        x = self.emb(self.history) + self.pos(torch.arange(MAX_SEQ, device=tokens.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
        last = torch.index_select(x, 1, pos.view(1))[:, 0]
        return self.head(self.ln(last))
'''},
    # A cache and one graph, but no mask: each step also attends to the positions after `pos`.
    "wrong": {"ps6-q1-solution": "class CachedGPT(TinyGPT):" + _PS6_ATTENTION.replace(
        "ATTEND", "keys, values = self.k_cache[i], self.v_cache[i]\n"
        "            att = softmax_last((q @ keys.transpose(-2, -1)) / math.sqrt(HEAD_DIM))")},
}
