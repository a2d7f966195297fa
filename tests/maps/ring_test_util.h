// File: tests/maps/ring_test_util.h
//
// Self-checking record bodies for the ring tests: each body carries its
// producer, sequence number, length and a checksum over everything else, so
// a torn, misplaced or duplicated record is detected by the consumer.
//
//   std::vector<uint8_t> body = MakeBody(producer, seq, BodyLenFor(seq));
//   ring.Write(kStressType, body.data(), body.size());
//   ...
//   CheckedBody got;
//   ASSERT_TRUE(ParseBody(span, &got)) << got.error;
#ifndef CUPROBE_TESTS_MAPS_RING_TEST_UTIL_H_
#define CUPROBE_TESTS_MAPS_RING_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace cuprobe::testing {

inline constexpr uint16_t kStressType = 0x5A17;

struct BodyHead {
  uint32_t producer;
  uint32_t seq;
  uint32_t len;  // body bytes before padding, this head included
  uint32_t reserved;
  uint64_t checksum;
};
static_assert(sizeof(BodyHead) == 24);

inline uint64_t Fnv1a(const uint8_t* p, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

inline uint8_t PayloadByte(uint32_t producer, uint32_t seq, size_t i) {
  return static_cast<uint8_t>(producer * 131u + seq * 7u + i * 29u + 1u);
}

// Varies over [24, 24 + 200) and is not always a multiple of 8.
inline uint32_t BodyLenFor(uint32_t seq) { return 24 + (seq * 37u) % 200u; }

inline uint64_t BodyChecksum(const BodyHead& head, const uint8_t* payload, size_t n) {
  uint64_t h = Fnv1a(reinterpret_cast<const uint8_t*>(&head), offsetof(BodyHead, checksum));
  return Fnv1a(payload, n, h);
}

inline std::vector<uint8_t> MakeBody(uint32_t producer, uint32_t seq, uint32_t len) {
  std::vector<uint8_t> body(len);
  BodyHead head{producer, seq, len, 0, 0};
  for (size_t i = sizeof(BodyHead); i < len; ++i) body[i] = PayloadByte(producer, seq, i);
  head.checksum = BodyChecksum(head, body.data() + sizeof(BodyHead), len - sizeof(BodyHead));
  std::memcpy(body.data(), &head, sizeof(head));
  return body;
}

struct CheckedBody {
  uint32_t producer = 0;
  uint32_t seq = 0;
  std::string error;
};

// Checks the body as delivered by Drain (with its zero padding).
inline bool ParseBody(absl::Span<const uint8_t> body, CheckedBody* out) {
  if (body.size() < sizeof(BodyHead)) {
    out->error = "body shorter than its head: " + std::to_string(body.size());
    return false;
  }
  BodyHead head;
  std::memcpy(&head, body.data(), sizeof(head));
  out->producer = head.producer;
  out->seq = head.seq;
  const size_t padded = ((8 + size_t{head.len} + 7) & ~size_t{7}) - 8;
  if (head.len < sizeof(BodyHead) || padded != body.size()) {
    out->error = "length " + std::to_string(head.len) + " does not match body of " +
                 std::to_string(body.size());
    return false;
  }
  const uint8_t* payload = body.data() + sizeof(BodyHead);
  const size_t n = head.len - sizeof(BodyHead);
  if (BodyChecksum(head, payload, n) != head.checksum) {
    out->error = "checksum mismatch (torn record?) producer " + std::to_string(head.producer) +
                 " seq " + std::to_string(head.seq);
    return false;
  }
  for (size_t i = head.len; i < body.size(); ++i) {
    if (body[i] != 0) {
      out->error = "non-zero padding";
      return false;
    }
  }
  return true;
}

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_MAPS_RING_TEST_UTIL_H_
