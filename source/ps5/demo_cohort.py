"""The demo cohort's ps5 code, by persona and solution cell: reference solutions with small
changes, so instructor side only (grader/cohort/demo.py: each persona, and why this file is here)."""

DEMO_SOLUTIONS = {
    # The breaks fixed (one graph), but the example counter still changes every step.
    "partial": {"ps5-q1-solution": '''class FastClassifier(Classifier):
    def forward(self, x, y):
        self.examples_seen += x.shape[0]
        h = self.block(self.fc1, self.ln1, x)
        h = self.block(self.fc2, self.ln2, h)
        return F.cross_entropy(self.head(h), y, ignore_index=IGNORE, label_smoothing=0.1)
'''},
    # One graph, no recompiles, correct; but a second pass through the blocks joins the loss
    # (times zero), so the backward pays for it too.
    "slow": {"ps5-q1-solution": '''class FastClassifier(Classifier):
    def forward(self, x, y):
        h = self.block(self.fc1, self.ln1, x)
        h = self.block(self.fc2, self.ln2, h)
        waste = self.block(self.fc2, self.ln2, self.block(self.fc1, self.ln1, x @ x.T @ x))
        loss = F.cross_entropy(self.head(h), y, ignore_index=IGNORE, label_smoothing=0.1)
        return loss + 0.0 * waste.sum()
'''},
    # Fast and one graph, but the unlabeled examples count in the loss (as class 0).
    "wrong": {"ps5-q1-solution": '''class FastClassifier(Classifier):
    def forward(self, x, y):
        h = self.block(self.fc1, self.ln1, x)
        h = self.block(self.fc2, self.ln2, h)
        return F.cross_entropy(self.head(h), y.clamp(min=0), label_smoothing=0.1)
'''},
}
