#pragma once

namespace refgrad {
inline constexpr const char* version = "0.1.0";
}
