"""The shuffle buffer of the shard job (tools/bench/wds_train.py), kept
apart so that it can be tested without torch.

It behaves as webdataset's `.shuffle(size, initial=...)`: it hands out
samples once it holds INITIAL, takes two from the source for each it hands
out until it holds SIZE, then one for one, and empties in random order at
the end of the source. So a worker reads 2 x SIZE samples in its first
SIZE steps and then one a step: where SIZE is a small part of a worker's
epoch, as in a real dataset, its reading and decoding overlap for most of
the epoch.
"""


def shuffled(src, size, initial, rng):
    """Yields the items of the iterable SRC in an order drawn from RNG (a
    random.Random) through a buffer of SIZE items, handing out from INITIAL
    on (both at least 1; INITIAL at most SIZE)."""
    size = max(1, size)
    initial = min(max(1, initial), size)
    src = iter(src)
    buf = []

    def take():
        k = rng.randrange(len(buf))
        buf[k], buf[-1] = buf[-1], buf[k]
        return buf.pop()

    for item in src:
        buf.append(item)
        if len(buf) < size:             # filling: a second item for this step
            more = next(src, buf)       # buf: a sentinel no source yields
            if more is not buf:
                buf.append(more)
        if len(buf) >= initial:
            yield take()
    while buf:
        yield take()
