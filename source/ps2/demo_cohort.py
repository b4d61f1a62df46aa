"""The demo cohort's ps2 code, by persona and solution cell: reference solutions with small
changes, so instructor side only (grader/cohort/demo.py: each persona, and why this file is here)."""

DEMO_SOLUTIONS = {
    # Correct, but the loop over groups and the slice writes are still there (not fused).
    "partial": {"ps2-q1-solution": '''class FusedGroupNormGELU(GroupNormGELU):
    pass
'''},
    # Fused the same way as the reference, but each element also goes through a chain of
    # wasted transcendental functions: 30 of them, about 7x the reference's time per call on the
    # 2-core CPU (12.6 ms against 1.8 ms compiled), far from its speed target. A longer chain
    # only made every eager call of the grading (201 of them for the recompile count) slower.
    "slow": {"ps2-q1-solution": '''class FusedGroupNormGELU(GroupNormGELU):
    def forward(self, x):
        rows, d = x.shape
        xs = x.view(rows, self.groups, d // self.groups)
        mu = xs.mean(dim=-1, keepdim=True)
        var = ((xs - mu) ** 2).mean(dim=-1, keepdim=True)
        y = ((xs - mu) / torch.sqrt(var + self.eps)).view(rows, d) * self.weight + self.bias
        waste = y
        for _ in range(10):
            waste = torch.sin(torch.exp(torch.tanh(waste)))
        y = y + 0.0 * waste
        return 0.5 * y * (1.0 + torch.tanh(0.7978845608 * (y + 0.044715 * y ** 3)))
'''},
    # Fused and fast, but ReLU instead of the tanh-GELU.
    "wrong": {"ps2-q1-solution": '''class FusedGroupNormGELU(GroupNormGELU):
    def forward(self, x):
        rows, d = x.shape
        xs = x.view(rows, self.groups, d // self.groups)
        mu = xs.mean(dim=-1, keepdim=True)
        var = ((xs - mu) ** 2).mean(dim=-1, keepdim=True)
        y = ((xs - mu) / torch.sqrt(var + self.eps)).view(rows, d) * self.weight + self.bias
        return torch.relu(y)
'''},
}
