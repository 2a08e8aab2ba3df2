"""The shard job's shuffle buffer (tools/bench/wds_shuffle.py), which the
shard benchmarks' timing rests on: every item comes out exactly once; it
hands out from INITIAL on and reads two items a step until the buffer is
full, then one (so reading overlaps decoding, as in webdataset); the order
depends on the generator alone; sizes out of range are clamped."""
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bench"))
from wds_shuffle import shuffled  # noqa: E402


class Counting:
    """An iterable that counts how many items were taken from it."""

    def __init__(self, n):
        self.n, self.taken = n, 0

    def __iter__(self):
        for i in range(self.n):
            self.taken += 1
            yield i


class ShuffleTest(unittest.TestCase):
    def test_every_item_once(self):
        for n, size, initial in [(0, 10, 5), (1, 10, 5), (7, 10, 5), (2000, 100, 10), (2000, 1000, 100), (50, 1, 1)]:
            got = list(shuffled(range(n), size, initial, random.Random(3)))
            self.assertEqual(sorted(got), list(range(n)), (n, size, initial))

    def test_reads_two_a_step_while_filling(self):
        src = Counting(2000)
        it = shuffled(src, 100, 10, random.Random(1))
        first = next(it)
        self.assertIn(first, range(10))
        self.assertEqual(src.taken, 10, "hands out once it holds INITIAL, reading two a step")
        # Step k (from 1) has taken 2k + 8, the buffer holding k + 8 after
        # it, until the buffer is full: step 91 leaves it at 99.
        for step in range(2, 92):
            next(it)
            self.assertEqual(src.taken, 2 * step + 8, "two a step while filling (step %d)" % step)
        for step in range(92, 201):
            next(it)
            self.assertEqual(src.taken, 190 + step - 91, "then one a step (step %d)" % step)

    def test_order_from_the_generator(self):
        a = list(shuffled(range(500), 50, 10, random.Random(7)))
        b = list(shuffled(range(500), 50, 10, random.Random(7)))
        c = list(shuffled(range(500), 50, 10, random.Random(8)))
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)
        self.assertNotEqual(a, list(range(500)))

    def test_sizes_clamped(self):
        self.assertEqual(sorted(shuffled(range(20), 0, 0, random.Random(1))), list(range(20)))
        self.assertEqual(sorted(shuffled(range(20), 5, 50, random.Random(1))), list(range(20)))


if __name__ == "__main__":
    unittest.main()
