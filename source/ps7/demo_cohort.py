"""The demo cohort's ps7 code, by persona and solution cell: reference solutions with small
changes, so instructor side only (grader/cohort/demo.py: each persona, and why this file is here)."""

DEMO_SOLUTIONS = {
    # Found and fixed the floor division (right eagerly and compiled), but kept the Python
    # counter: one graph, but a compile per call, so speed is not credited.
    "partial": {"ps7-q1-solution": '''class FixedSensorModel(SensorModel):
    def bucket(self, t):
        rel = t - t[:, :1]
        return torch.round((rel - torch.fmod(rel, BUCKET_S)) / BUCKET_S).long().clamp(max=BUCKETS - 1)
'''},
    # Both causes fixed, right compiled, one graph, one compile; but forward also runs the MLP
    # block three more times and throws the results away (times zero).
    "slow": {"ps7-q1-solution": '''class FixedSensorModel(SensorModel):
    def bucket(self, t):
        rel = t - t[:, :1]
        return torch.round((rel - torch.fmod(rel, BUCKET_S)) / BUCKET_S).long().clamp(max=BUCKETS - 1)

    def forward(self, t, x):
        h = self.inp(x) + self.when(self.bucket(t))
        for _ in range(3):
            h = h + 0.0 * self.fc2(self.gelu(self.fc1(self.norm1(h + 1.0))))   # wasted work
        h = h + self.fc2(self.gelu(self.fc1(self.norm1(h))))
        return self.head(self.norm2(h))
'''},
    # The blind rewrite: floor(t / B) instead of `//`, no counter. Fast and one graph, and what
    # Inductor computes -- but eager's buckets were the model's, so the outputs are wrong.
    "wrong": {"ps7-q1-solution": '''class FixedSensorModel(SensorModel):
    def bucket(self, t):
        return torch.floor((t - t[:, :1]) / BUCKET_S).long().clamp(max=BUCKETS - 1)

    def forward(self, t, x):
        h = self.inp(x) + self.when(self.bucket(t))
        h = h + self.fc2(self.gelu(self.fc1(self.norm1(h))))
        return self.head(self.norm2(h))
'''},
}
