"""The demo cohort's _template code, by persona and solution cell: reference solutions with small
changes, so instructor side only (grader/cohort/demo.py: each persona, and why this file is here)."""

DEMO_SOLUTIONS = {
    # Correct, but the .item() is kept: not one graph.
    "partial": {"_template-q1-solution": '''class FixedModel(Original):
    def forward(self, x):
        h = self.fc(x)
        scale = float(h.abs().max().item())
        return torch.tanh(h / (scale + 1e-6))
'''},
    # Correct and one graph, but forward also computes a product it throws away.
    "slow": {"_template-q1-solution": '''class FixedModel(Original):
    def forward(self, x):
        h = self.fc(x)
        h = h + 0.0 * (x @ x.T @ x).mean()   # wasted work
        scale = h.abs().max()
        return torch.tanh(h / (scale + 1e-6))
'''},
    # One graph, but the scale is left out: wrong outputs.
    "wrong": {"_template-q1-solution": '''class FixedModel(Original):
    def forward(self, x):
        return torch.tanh(self.fc(x))
'''},
}
