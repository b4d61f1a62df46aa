"""The demo cohort's ps1 code, by persona and solution cell: reference solutions with small
changes, so instructor side only (grader/cohort/demo.py: each persona, and why this file is here)."""

DEMO_SOLUTIONS = {
    # Fixed the `if` and the `print`, kept `.item()` and the mask: correct, two breaks left.
    "partial": {"ps1-q1-solution": '''class FixedModel(Original):
    def forward(self, x):
        h = self.fc1(x)
        h = torch.where(x.mean() > 0, torch.tanh(h) * 1.5, torch.sigmoid(h) - 0.5)
        scale = h.abs().max().item()
        h = h / (scale + 1e-6)
        pos_mean = h[h > 0].mean()
        h = torch.sin(h - pos_mean) * torch.cos(h + pos_mean)
        return torch.tanh(self.fc2(h).exp())
'''},
    # One graph and correct, but forward also computes a large product it throws away.
    "slow": {"ps1-q1-solution": '''class FixedModel(Original):
    def forward(self, x):
        h = self.fc1(x)
        h = torch.where(x.mean() > 0, torch.tanh(h) * 1.5, torch.sigmoid(h) - 0.5)
        h = h + 0.0 * torch.tanh((x @ x.T @ x).mean())   # wasted work
        scale = h.abs().max()
        h = h / (scale + 1e-6)
        pos = h > 0
        pos_mean = torch.where(pos, h, 0.0).sum() / pos.sum()
        h = torch.sin(h - pos_mean) * torch.cos(h + pos_mean)
        return torch.tanh(self.fc2(h).exp())
'''},
    # Fast, but only one side of the `if`: right on the visible inputs, wrong on the hidden ones.
    "wrong": {"ps1-q1-solution": '''class FixedModel(Original):
    def forward(self, x):
        h = torch.tanh(self.fc1(x)) * 1.5
        scale = h.abs().max()
        h = h / (scale + 1e-6)
        pos = h > 0
        pos_mean = torch.where(pos, h, 0.0).sum() / pos.sum()
        h = torch.sin(h - pos_mean) * torch.cos(h + pos_mean)
        return torch.tanh(self.fc2(h).exp())
'''},
}
