// File: support/status_macros.h
//
// The one error type of cuprobe is absl::Status / absl::StatusOr<T>. These
// macros propagate errors without boilerplate:
//
//   absl::StatusOr<Image> Load(std::string_view path) {
//     CUPROBE_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
//     CUPROBE_RETURN_IF_ERROR(Validate(bytes));
//     return Image(std::move(bytes));
//   }
#ifndef CUPROBE_SUPPORT_STATUS_MACROS_H_
#define CUPROBE_SUPPORT_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CUPROBE_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status cuprobe_status_ = (expr);           \
    if (!cuprobe_status_.ok()) return cuprobe_status_; \
  } while (0)

#define CUPROBE_STATUS_CONCAT_INNER_(a, b) a##b
#define CUPROBE_STATUS_CONCAT_(a, b) CUPROBE_STATUS_CONCAT_INNER_(a, b)

#define CUPROBE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()

// `lhs` may declare a variable: CUPROBE_ASSIGN_OR_RETURN(auto x, F());
#define CUPROBE_ASSIGN_OR_RETURN(lhs, expr) \
  CUPROBE_ASSIGN_OR_RETURN_IMPL_(           \
      CUPROBE_STATUS_CONCAT_(cuprobe_statusor_, __LINE__), lhs, expr)

#endif  // CUPROBE_SUPPORT_STATUS_MACROS_H_
