"""Weights of the topic-shift scorer (memory.episodes.boundaries). Written by
tests/benchmarks/fit_boundaries.py from TIAGE anno_train.json only; do not edit by hand."""

MEAN: list[float] = [
    0.687736,  # distance_1
    0.641265,  # distance_2
    0.623822,  # distance_3
    0.761195,  # distance_skip
    0.173532,  # depth_2
    0.693361,  # distance_next
    -0.0153991,  # relative_distance
    0.884203,  # new_words
    0.0384791,  # shift_cue
    0.26571,  # acknowledgement
    0.312614,  # answer_expected
    0.283015,  # asks
    2.40584,  # log_words
]
SCALE: list[float] = [
    0.173768,  # distance_1
    0.141752,  # distance_2
    0.126434,  # distance_3
    0.159051,  # distance_skip
    0.208972,  # depth_2
    0.171949,  # distance_next
    0.165987,  # relative_distance
    0.203685,  # new_words
    0.19235,  # shift_cue
    0.441711,  # acknowledgement
    0.463558,  # answer_expected
    0.450463,  # asks
    0.303561,  # log_words
]
COEFFICIENTS: list[float] = [
    0.591234,  # distance_1
    0.633727,  # distance_2
    -0.0521931,  # distance_3
    -0.207726,  # distance_skip
    0.206505,  # depth_2
    -0.25003,  # distance_next
    -0.181753,  # relative_distance
    0.118524,  # new_words
    0.168558,  # shift_cue
    0.0137006,  # acknowledgement
    -0.365441,  # answer_expected
    0.692599,  # asks
    0.259586,  # log_words
]
INTERCEPT = -1.87556
BASE_RATE = 0.201958
THRESHOLD = -1.05
