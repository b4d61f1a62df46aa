"""The demo cohort's _template submissions that need code of the set's own: persona -> solution
cell -> its text ("partial": half done, "slow": correct, one graph, wasted work, "wrong":
fast, wrong).

Instructor side only: these are the reference solutions with small changes, so they live beside
the source notebook, which students never get (nbgrader_config.py keeps this file out of
release/). `make grade` builds the demo cohort from them when submitted/ is empty
(grader/cohort/demo.py).
"""

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
