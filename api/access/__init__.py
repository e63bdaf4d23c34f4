"""What keys and limits are made of, below ``api.auth``: secrets and their hashes, the live copy of the
key store, usage counters shared by a deployment's servers, rate limits, and the limits themselves."""
