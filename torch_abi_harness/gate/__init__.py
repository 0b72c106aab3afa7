"""The gate wing: a release candidate judged for release.

candidate: the candidate on both axes of the matrix; probe_extension: the header probe generated from its
headers; evidence: what its headers, operators and probe cells show; decide: the decision (GO, NO-GO);
orchestrate: a GateRequest to its GateOutcome (the order of all of the above); replay: every release as the
candidate."""
