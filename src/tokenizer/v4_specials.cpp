#include "tokenizer/v4_specials.h"

namespace ds4::tokenizer {

namespace {
constexpr V4Special kV4[] = {
    {128815, "<｜action｜>", false},
    {128816, "<｜query｜>", false},
    {128817, "<｜authority｜>", false},
    {128818, "<｜domain｜>", false},
    {128819, "<｜title｜>", false},
    {128820, "<｜read_url｜>", false},
    {128821, "<think>", true},
    {128822, "</think>", true},
    {128823, "<｜latest_reminder｜>", false},
    {128824, "<｜reserved▁128824｜>", false},  // filler: HF numbers added tokens without gaps
    {128825, "｜DSML｜", true},
};
}  // namespace

std::span<const V4Special> v4_specials() { return kV4; }

}  // namespace ds4::tokenizer
