"""Weights of the topic-shift scorer (memory.episodes.boundaries). Written by
tests/benchmarks/fit_boundaries.py from TIAGE anno_train.json only (penalty, THRESHOLD and
MIN_MESSAGES chosen by cross-validation inside train; CV_* are those out-of-fold figures);
do not edit by hand."""

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
    0.532376,  # distance_1
    0.573037,  # distance_2
    -0.0279196,  # distance_3
    -0.183447,  # distance_skip
    0.216868,  # depth_2
    -0.235851,  # distance_next
    -0.117947,  # relative_distance
    0.118696,  # new_words
    0.167734,  # shift_cue
    0.0140013,  # acknowledgement
    -0.358297,  # answer_expected
    0.677717,  # asks
    0.252063,  # log_words
]
INTERCEPT = -1.85886
BASE_RATE = 0.201958
THRESHOLD = -1.1
MIN_MESSAGES = 2
L2 = 10
CV_AP = 0.570176
CV_F1 = 0.564482
CV_PK = 0.372359
CV_WINDOWDIFF = 0.410328
