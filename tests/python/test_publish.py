"""epochfs.publish_order without a mount: what it writes to a stream.

A directory standing in for MOUNT/.epochfs/order/ takes the text: paths one
a line, (path, offset, length) tuples as "#range" lines, paths that hold a
newline skipped, bad ranges refused before anything is written."""
import os
import tempfile
import unittest

from epochfs._mounts import publish_order


class PublishOrder(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.mount = self.tmp.name
        os.makedirs(os.path.join(self.mount, ".epochfs", "order"))

    def tearDown(self):
        self.tmp.cleanup()

    def text(self, stream):
        with open(os.path.join(self.mount, ".epochfs", "order", stream)) as f:
            return f.read()

    def test_paths_and_ranges(self):
        n = publish_order(self.mount, "s", ["a/1.jpg", ("shards/0.tar", 0, 4096), "bad\nname",
                                            ("shards/0.tar", 4096, 100), ("x\ny", 0, 1)])
        self.assertEqual(n, 3)
        self.assertEqual(self.text("s"), "a/1.jpg\n#range 0 4096 shards/0.tar\n#range 4096 100 shards/0.tar\n")

    def test_bad_ranges_are_refused(self):
        for bad in (("a", -1, 10), ("a", 0, 0)):
            with self.assertRaises(ValueError):
                publish_order(self.mount, "b", [bad])

    def test_a_long_order_is_written_whole(self):
        paths = ["d/%06d.jpg" % i for i in range(20000)]
        self.assertEqual(publish_order(self.mount, "long", paths), 20000)
        self.assertEqual(self.text("long").splitlines(), paths)


if __name__ == "__main__":
    unittest.main()
