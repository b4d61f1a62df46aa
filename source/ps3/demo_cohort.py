"""The demo cohort's ps3 code, by persona and solution cell: reference solutions with small
changes, so instructor side only (grader/cohort/demo.py: each persona, and why this file is here)."""

# ("partial": question 1 only, the default.)
DEMO_SOLUTIONS = {
    # A valid rule that never compiles (right for the short jobs, slow for the long ones), and a
    # scorer padded to 64 rows that keeps the per-row loop: correct, one graph, one compile, but
    # a copy of the loop's body in the graph for every row.
    "slow": {"ps3-q1-solution": '''class JobPlanner:
    @staticmethod
    def mode_for(calls: int, device: str) -> str:
        return "none"   # never pays a compile
''', "ps3-q2-solution": '''class BatchScorer(PerSampleScorer):
    def forward(self, x):
        n = x.shape[0]
        padded = torch.cat([x, x.new_zeros(64 - n, x.shape[1])])   # always 64 rows
        rows = []
        for i in range(64):
            r = torch.relu(self.fc(padded[i]))
            rows.append(r / (r.norm() + 1e-6))
        return torch.stack(rows)[:n]
'''},
    # The break-even formula with its units mixed up (microseconds saved against seconds of
    # compile), so it compiles every job, short ones too.
    "wrong": {"ps3-q1-solution": '''class JobPlanner:
    @staticmethod
    def mode_for(calls: int, device: str) -> str:
        saved_us, compile_s = 140 - 55, 5.0
        return "reduce-overhead" if calls * saved_us > compile_s else "none"
'''},
}
