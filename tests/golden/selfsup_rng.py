"""selfsup_rng.py — lib/rng.c's counter-based generator restated in Python: Philox4x32-10,
the stream a key names, rng_randint (Lemire's multiply-and-reject, spans up to 2^32) and
rng_permutation (Fisher-Yates from the top, each swap partner a randint).

For the fixtures whose reference must make selfsup's own random choices (NPID's negatives):
the same key gives the same numbers here and in C, word for word.
"""
M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF
PURPOSE_DATASET, PURPOSE_TRAIN, PURPOSE_CLUSTER = 4, 6, 7


def philox(ctr, key):
    x, k = list(ctr), list(key)
    for r in range(10):
        if r:
            k = [(k[0] + W0) & MASK, (k[1] + W1) & MASK]
        p0, p1 = M0 * x[0], M1 * x[2]
        x = [(p1 >> 32) ^ x[1] ^ k[0], p1 & MASK, (p0 >> 32) ^ x[3] ^ k[1], p0 & MASK]
    return x


class Stream:
    """rng_stream_init's stream for the key (seed, purpose, epoch, sample_index, transform_pos)."""

    def __init__(self, seed, purpose, epoch=0, sample_index=0, transform_pos=0):
        self.key = [seed & MASK, (seed >> 32) & MASK]
        self.ctr = [0, transform_pos | (purpose << 16), sample_index, epoch]
        self.block, self.used = philox(self.ctr, self.key), 0

    def u32(self):
        if self.used == 4:
            self.ctr[0] += 1
            self.block, self.used = philox(self.ctr, self.key), 0
        self.used += 1
        return self.block[self.used - 1]

    def randint(self, lo, hi):
        """Uniform in [lo, hi) for hi - lo <= 2^32, as rng_randint."""
        span = hi - lo
        if span == 1 << 32:
            return lo + self.u32()
        m = self.u32() * span
        if (m & MASK) < span:
            threshold = ((1 << 32) - span) % span
            while (m & MASK) < threshold:
                m = self.u32() * span
        return lo + (m >> 32)

    def permutation(self, n):
        """rng_permutation: 0..n-1 shuffled from the last position down."""
        a = list(range(n))
        for i in range(n, 1, -1):
            j = self.randint(0, i)
            a[i - 1], a[j] = a[j], a[i - 1]
        return a
