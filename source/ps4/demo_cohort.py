"""The demo cohort's ps4 code, by persona and solution cell: reference solutions with small
changes, so instructor side only (grader/cohort/demo.py: each persona, and why this file is here)."""

DEMO_SOLUTIONS = {
    # The two habits deleted (one graph, no counter), but compiled as torch.compile's default
    # would: the first prompt length is baked in, and the second recompiles.
    "partial": {"ps4-q1-solution": '''class FastGPT(TinyGPT):
    def forward(self, idx):
        B, T = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
        logits = self.head(self.ln(x[:, -1]))
        return torch.softmax(logits, dim=-1)
'''},
    # One graph for every length, correct; but the blocks run twice.
    "slow": {"ps4-q1-solution": '''class FastGPT(TinyGPT):
    compile_dynamic = True

    def forward(self, idx):
        B, T = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
        waste = x
        for blk in self.blocks:                      # wasted work
            waste = waste + self.attention(blk, waste)
            waste = waste + self.mlp(blk, waste)
        x = x + 0.0 * torch.tanh(waste)
        logits = self.head(self.ln(x[:, -1]))
        return torch.softmax(logits, dim=-1)
'''},
    # Fast, but the final layer norm is skipped.
    "wrong": {"ps4-q1-solution": '''class FastGPT(TinyGPT):
    compile_dynamic = True

    def forward(self, idx):
        B, T = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
        logits = self.head(x[:, -1])
        return torch.softmax(logits, dim=-1)
'''},
}
