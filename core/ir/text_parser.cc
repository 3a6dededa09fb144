// A recursive-descent parser for the text form (text.h). Every error names file:line:col and what was
// expected; nesting is capped so that hostile input cannot exhaust the stack, and quoted input in
// messages is truncated.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <unordered_map>

#include "core/base/error.h"
#include "core/ir/dim_expr.h"
#include "core/ir/text.h"

namespace oar::ir {
namespace {

constexpr int kMaxDepth = 200;

class Parser {
 public:
  Parser(IrContext& ctx, std::string_view text, std::string_view file) : ctx_(ctx), text_(text), file_(file) {}

  std::unique_ptr<Program> ParseModule() {
    SkipSpace();
    Operation* op = ParseOp();
    // Adopt before anything else can throw, so the module is freed on error.
    if (op->name() != "builtin.module") {
      const Location loc = op->location();
      DestroyDetached(op);
      FailAt(loc, "expected a builtin.module at the top level");
    }
    std::unique_ptr<Program> program;
    try {
      program = std::make_unique<Program>(ctx_, op);
    } catch (const Error& e) {
      const Location loc = op->location();
      DestroyDetached(op);
      FailAt(loc, "{}", e.what());
    }
    SkipSpace();
    if (pos_ < text_.size()) Fail("expected the end of the input after the module, got {}", Peek());
    return program;
  }

  Type ParseTypeOnly() {
    SkipSpace();
    Type t = ParseType();
    SkipSpace();
    if (pos_ < text_.size()) Fail("expected the end of the type, got {}", Peek());
    return t;
  }

 private:
  // ---- errors ----
  template <typename... Args>
  [[noreturn]] void Fail(fmt::format_string<Args...> f, Args&&... args) {
    FailAt(Here(), f, std::forward<Args>(args)...);
  }
  template <typename... Args>
  [[noreturn]] void FailAt(Location loc, fmt::format_string<Args...> f, Args&&... args) {
    Throw(ErrorCode::kInvalidArgument, "{}:{}:{}: error: {}", file_, loc.line, loc.col,
          fmt::format(f, std::forward<Args>(args)...));
  }
  // Line and column of the cursor, computed incrementally (the cursor mostly moves forward).
  Location Here() {
    if (pos_ < loc_pos_) {
      loc_pos_ = 0;
      loc_ = {1, 1};
    }
    for (; loc_pos_ < pos_ && loc_pos_ < text_.size(); ++loc_pos_) {
      if (text_[loc_pos_] == '\n') {
        ++loc_.line;
        loc_.col = 1;
      } else {
        ++loc_.col;
      }
    }
    return loc_;
  }
  // What is at the cursor, quoted and truncated, for messages.
  std::string Peek() const {
    if (pos_ >= text_.size()) return "the end of the input";
    size_t n = 0;
    while (pos_ + n < text_.size() && n < 24 && text_[pos_ + n] != '\n') ++n;
    std::string s(text_.substr(pos_, n));
    for (char& c : s) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    }
    return "'" + s + "'";
  }

  // ---- lexing ----
  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  bool TryChar(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void Expect(char c, const char* what) {
    if (!TryChar(c)) Fail("expected '{}' {}, got {}", c, what, Peek());
  }
  bool TryWord(std::string_view w) {
    SkipSpace();
    if (text_.substr(pos_, w.size()) != w) return false;
    const size_t end = pos_ + w.size();
    if (end < text_.size() && IsIdentChar(text_[end])) return false;
    pos_ = end;
    return true;
  }
  static bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
  static bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
  std::string_view Identifier(const char* what) {
    SkipSpace();
    if (pos_ >= text_.size() || !IsIdentStart(text_[pos_])) Fail("expected {}, got {}", what, Peek());
    const size_t start = pos_;
    while (pos_ < text_.size() && IsIdentChar(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }
  // name or dotted.name (discardable attributes)
  std::string_view AttrName() {
    SkipSpace();
    const size_t start = pos_;
    Identifier("an attribute name");
    while (pos_ + 1 < text_.size() && text_[pos_] == '.' && IsIdentStart(text_[pos_ + 1])) {
      ++pos_;
      Identifier("an attribute name");
    }
    return text_.substr(start, pos_ - start);
  }
  // dialect.op
  std::string_view OpName() {
    SkipSpace();
    const size_t start = pos_;
    Identifier("an op name (dialect.op)");
    if (pos_ >= text_.size() || text_[pos_] != '.') Fail("expected '.' in the op name (dialect.op), got {}", Peek());
    ++pos_;
    Identifier("the op name after the dialect");
    return text_.substr(start, pos_ - start);
  }
  // %name (letters, digits, _)
  std::string_view ValueName() {
    SkipSpace();
    if (pos_ >= text_.size() || text_[pos_] != '%') Fail("expected a value (%name), got {}", Peek());
    const size_t start = pos_++;
    while (pos_ < text_.size() && IsIdentChar(text_[pos_])) ++pos_;
    if (pos_ == start + 1) Fail("expected a value name after '%'");
    return text_.substr(start, pos_ - start);
  }
  int64_t Integer(const char* what) {
    SkipSpace();
    const size_t start = pos_;
    if (pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+')) ++pos_;
    if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      pos_ = start;
      Fail("expected {}, got {}", what, Peek());
    }
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    const std::string s(text_.substr(start, pos_ - start));
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno == ERANGE) {
      pos_ = start;
      Fail("integer {} does not fit in 64 bits", s.substr(0, 32));
    }
    return v;
  }
  std::string String() {
    SkipSpace();
    if (pos_ >= text_.size() || text_[pos_] != '"') Fail("expected a string, got {}", Peek());
    ++pos_;
    std::string out;
    for (;;) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') Fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) Fail("unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'x': {
          auto hex = [&](char h) -> int {
            if (h >= '0' && h <= '9') return h - '0';
            if (h >= 'a' && h <= 'f') return h - 'a' + 10;
            if (h >= 'A' && h <= 'F') return h - 'A' + 10;
            return -1;
          };
          const int hi = pos_ < text_.size() ? hex(text_[pos_]) : -1;
          const int lo = pos_ + 1 < text_.size() ? hex(text_[pos_ + 1]) : -1;
          if (hi < 0 || lo < 0) Fail("expected two hex digits after \\x");
          out += static_cast<char>(hi * 16 + lo);
          pos_ += 2;
          break;
        }
        default: --pos_; Fail("unknown escape '\\{}' in a string", e == '\'' ? '?' : e);
      }
    }
    return out;
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxDepth) p.Fail("nesting deeper than {} levels", kMaxDepth);
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  // ---- types ----
  DType DTypeWord(std::string_view w, Location at) {
    const DType t = DTypeFromIrName(w);
    if (t == DType::kInvalid) FailAt(at, "expected a dtype (f32, f64, f16, bf16, i8, u8, i32, i64, i1), got '{}'", w.substr(0, 24));
    return t;
  }
  Dims ExtentList() {
    Expect('[', "to start the extents");
    Dims dims;
    if (TryChar(']')) return dims;
    do {
      SkipSpace();
      if (dims.size() >= Dims::kMaxRank) Fail("more than {} extents", Dims::kMaxRank);
      dims.push_back(Extent());
    } while (TryChar(','));
    Expect(']', "to end the extents");
    return dims;
  }

  template <typename F>
  auto At(Location at, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error& e) {
      FailAt(at, "{}", e.what());
    }
  }
  // ---- extents: '?', an integer, a symbol or an expression of them (dim_expr.h) ----
  int64_t Extent() {
    if (TryChar('?')) return SymDim::kDynamic;
    SkipSpace();
    const Location at = Here();
    const DimPoly p = SumExpr();
    if (const std::optional<int64_t> c = p.AsConstant(); c && *c < 0) FailAt(at, "extent {} is negative", *c);
    return At(at, [&] { return DimFromPoly(ctx_, p); });
  }
  int64_t ExtentOf(Location at, const DimPoly& p) { return At(at, [&] { return DimFromPoly(ctx_, p); }); }
  DimPoly SumExpr() {
    DepthGuard guard(*this);
    SkipSpace();
    const Location at = Here();
    const bool negate = TryChar('-');
    DimPoly p = TermExpr();
    if (negate) p = At(at, [&] { return DimPoly::Constant(0) - p; });
    for (;;) {
      SkipSpace();
      const Location op_at = Here();
      if (TryChar('+')) {
        const DimPoly t = TermExpr();
        p = At(op_at, [&] { return p + t; });
      } else if (TryChar('-')) {
        const DimPoly t = TermExpr();
        p = At(op_at, [&] { return p - t; });
      } else {
        return p;
      }
    }
  }
  DimPoly TermExpr() {
    SkipSpace();
    const Location at = Here();
    DimPoly p = FactorExpr();
    for (;;) {
      SkipSpace();
      const Location op_at = Here();
      if (TryChar('*')) {
        const DimPoly f = FactorExpr();
        p = At(op_at, [&] { return p * f; });
      } else if (TryChar('/')) {
        const DimPoly f = FactorExpr();
        const int64_t num = ExtentOf(at, p);
        const int64_t den = ExtentOf(op_at, f);
        p = At(op_at, [&] { return DimPoly::Of(ctx_, DimFloorDiv(ctx_, num, den)); });
      } else {
        return p;
      }
    }
  }
  DimPoly FactorExpr() {
    DepthGuard guard(*this);
    SkipSpace();
    const Location at = Here();
    if (TryChar('(')) {
      DimPoly p = SumExpr();
      Expect(')', "to close the extent expression");
      return p;
    }
    if (pos_ < text_.size() && IsIdentStart(text_[pos_])) {
      const std::string_view name = Identifier("a symbolic extent");
      const bool call = (name == "min" || name == "max" || name == "bcast") && TryChar('(');
      if (!call) return DimPoly::Of(ctx_, At(at, [&] { return ctx_.Symbol(name); }));
      const Location a_at = Here();
      const int64_t a = ExtentOf(a_at, SumExpr());
      Expect(',', "between the operands of the extent function");
      const Location b_at = Here();
      const int64_t b = ExtentOf(b_at, SumExpr());
      Expect(')', "to close the extent function");
      return DimPoly::Of(ctx_, At(at, [&] {
        return name == "min" ? DimMin(ctx_, a, b) : name == "max" ? DimMax(ctx_, a, b) : DimBroadcast(ctx_, a, b);
      }));
    }
    if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      Fail("expected an extent (an integer >= 0, ?, a symbol or an expression of them), got {}", Peek());
    }
    return DimPoly::Constant(Integer("an extent"));
  }
  Type ParseType() {
    DepthGuard guard(*this);
    SkipSpace();
    const Location type_at = Here();
    const std::string_view w = Identifier("a type (tensor<...>, vec<...> or a dtype)");
    if (w == "tensor") {
      Expect('<', "after 'tensor'");
      Dims dims = ExtentList();
      Expect(',', "between the extents and the dtype");
      SkipSpace();
      const Location dtype_at = Here();
      const DType t = DTypeWord(Identifier("a dtype"), dtype_at);
      Expect('>', "to end the tensor type");
      return ctx_.TensorType(t, dims);
    }
    if (w == "vec") {
      Expect('<', "after 'vec'");
      std::vector<Type> elements;
      if (!TryChar('>')) {
        do elements.push_back(ParseType());
        while (TryChar(','));
        Expect('>', "to end the vec type");
      }
      return ctx_.VectorType(elements);
    }
    return ctx_.ScalarType(DTypeWord(w, type_at));
  }

  // ---- attributes ----
  Attribute ParseAttribute() {
    DepthGuard guard(*this);
    SkipSpace();
    if (pos_ >= text_.size()) Fail("expected an attribute value, got the end of the input");
    const char c = text_[pos_];
    if (c == '"') return ctx_.StringAttr(String());
    if (c == '[') {
      ++pos_;
      std::vector<Attribute> elements;
      if (!TryChar(']')) {
        do elements.push_back(ParseAttribute());
        while (TryChar(','));
        Expect(']', "to end the array");
      }
      return ctx_.ArrayAttr(elements);
    }
    if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c))) return Number();
    const size_t start = pos_;
    const std::string_view w = Identifier("an attribute value");
    if (w == "true") return ctx_.BoolAttr(true);
    if (w == "false") return ctx_.BoolAttr(false);
    if (w == "inf") return ctx_.FloatAttr(std::numeric_limits<double>::infinity());
    if (w == "nan") return ctx_.FloatAttr(std::numeric_limits<double>::quiet_NaN());
    if (w == "device") {
      Expect('<', "after 'device'");
      Attribute a = ctx_.DeviceAttr(String());
      Expect('>', "to end the device");
      return a;
    }
    if (w == "shape") {
      Expect('<', "after 'shape'");
      Attribute a = ctx_.ShapeAttr(ExtentList());
      Expect('>', "to end the shape");
      return a;
    }
    if (w == "type") {
      Expect('<', "after 'type'");
      Attribute a = ctx_.TypeAttr(ParseType());
      Expect('>', "to end the type attribute");
      return a;
    }
    const DType t = DTypeFromIrName(w);
    if (t != DType::kInvalid) return ctx_.DTypeAttr(t);
    pos_ = start;
    Fail("expected an attribute value (true, false, a number, \"string\", [array], a dtype, device<...>, shape<...>, "
         "type<...>), got {}", Peek());
  }
  Attribute Number() {
    const size_t start = pos_;
    if (text_[pos_] == '-' || text_[pos_] == '+') ++pos_;
    if (TryWord("inf")) return ctx_.FloatAttr(text_[start] == '-' ? -std::numeric_limits<double>::infinity()
                                                                     : std::numeric_limits<double>::infinity());
    bool is_float = false;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E') {
        is_float = true;
        ++pos_;
        if ((c == 'e' || c == 'E') && pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+')) ++pos_;
      } else {
        break;
      }
    }
    const std::string s(text_.substr(start, pos_ - start));
    if (!is_float) {
      pos_ = start;
      return ctx_.IntAttr(Integer("an integer"));
    }
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || s.size() < 2) {
      pos_ = start;
      Fail("expected a number, got {}", Peek());
    }
    if (errno == ERANGE && std::isinf(v)) {
      pos_ = start;
      Fail("float {} is out of range (write inf)", s.substr(0, 32));
    }
    return ctx_.FloatAttr(v);
  }

  // ---- values ----
  void DefineValue(std::string_view name, Value v, Location loc) {
    if (!values_.emplace(std::string(name), v).second) FailAt(loc, "value {} is defined twice", name.substr(0, 32));
  }
  Value UseValue(std::string_view name, Location loc) {
    auto it = values_.find(std::string(name));
    if (it == values_.end()) FailAt(loc, "use of undefined value {}", name.substr(0, 32));
    return it->second;
  }

  // ---- operations ----
  // The ops created so far that are not yet in a block: freed if parsing fails.
  static void DestroyDetached(Operation* op) {
    op->WalkPostOrder([](Operation* o) {
      for (OpOperand& u : o->operands()) u.set(Value());
    });
    for (uint32_t i = 0; i < op->num_results(); ++i) {
      while (OpOperand* u = op->result(i).first_use()) u->set(Value());
    }
    op->Erase();
  }

  Operation* ParseOp() {
    DepthGuard guard(*this);
    SkipSpace();
    const Location loc = Here();
    std::vector<std::pair<std::string_view, Location>> result_names;
    if (pos_ < text_.size() && text_[pos_] == '%') {
      do {
        SkipSpace();
        const Location at = Here();
        result_names.emplace_back(ValueName(), at);
      } while (TryChar(','));
      Expect('=', "after the result names");
    }
    SkipSpace();
    const Location name_loc = Here();
    const std::string_view name = OpName();
    const OpInfo* info = ctx_.FindOp(name);
    if (info == nullptr) {
      try {
        ctx_.GetOp(name);
      } catch (const Error& e) {
        FailAt(name_loc, "{}", e.what());
      }
    }
    Expect('(', "to start the operands");
    std::vector<Value> operands;
    if (!TryChar(')')) {
      do {
        SkipSpace();
        const Location at = Here();
        operands.push_back(UseValue(ValueName(), at));
      } while (TryChar(','));
      Expect(')', "to end the operands");
    }
    // Regions are parsed once the op exists (they need its signature): skip them now, remember where they are.
    SkipSpace();
    std::vector<size_t> region_starts;
    if (pos_ < text_.size() && text_[pos_] == '(') {
      ++pos_;
      do {
        SkipSpace();
        region_starts.push_back(pos_);
        SkipBalanced();
      } while (TryChar(','));
      Expect(')', "to end the regions");
    }
    std::vector<NamedAttribute> attrs;
    if (TryChar('{')) {
      if (!TryChar('}')) {
        do {
          const std::string_view attr_name = AttrName();
          Expect('=', "after the attribute name");
          attrs.push_back({ctx_.Intern(attr_name), ParseAttribute()});
        } while (TryChar(','));
        Expect('}', "to end the attributes");
      }
    }
    Expect(':', "before the op's type signature");
    Expect('(', "to start the operand types");
    std::vector<Type> operand_types;
    if (!TryChar(')')) {
      do operand_types.push_back(ParseType());
      while (TryChar(','));
      Expect(')', "to end the operand types");
    }
    SkipSpace();
    if (text_.substr(pos_, 2) != "->") Fail("expected '->' before the result types, got {}", Peek());
    pos_ += 2;
    std::vector<Type> result_types;
    if (TryChar('(')) {
      if (!TryChar(')')) {
        do result_types.push_back(ParseType());
        while (TryChar(','));
        Expect(')', "to end the result types");
      }
    } else {
      result_types.push_back(ParseType());
    }
    const size_t end_pos = pos_;

    if (operand_types.size() != operands.size()) {
      FailAt(loc, "{} has {} operands but {} operand types", name, operands.size(), operand_types.size());
    }
    for (size_t i = 0; i < operands.size(); ++i) {
      if (operands[i].type() != operand_types[i]) {
        FailAt(loc, "{}: operand {} has type {} but the signature says {}", name, i,
               PrintType(ctx_, operands[i].type()), PrintType(ctx_, operand_types[i]));
      }
    }
    if (result_types.size() != result_names.size()) {
      FailAt(loc, "{} names {} results but its signature has {} result types", name, result_names.size(),
             result_types.size());
    }
    if (static_cast<int>(region_starts.size()) != info->num_regions) {
      FailAt(loc, "{} takes {} regions, got {}", name, info->num_regions, region_starts.size());
    }
    try {
      attrs = CompleteAttributes(ctx_, *info, std::move(attrs));
    } catch (const Error& e) {
      FailAt(loc, "{}", e.what());
    }
    Operation* op = Operation::Create(*info, operands, result_types, std::move(attrs), info->num_regions);
    op->set_location(loc);
    try {
      // Regions see the values defined so far; their own values stay visible to later ops only as far as
      // the verifier allows (it checks dominance), but names must be unique program-wide.
      for (size_t r = 0; r < region_starts.size(); ++r) {
        pos_ = region_starts[r];
        ParseRegion(op->region(static_cast<uint32_t>(r)));
      }
      for (size_t i = 0; i < result_names.size(); ++i) {
        DefineValue(result_names[i].first, op->result(static_cast<uint32_t>(i)), result_names[i].second);
      }
    } catch (...) {
      DestroyDetached(op);
      throw;
    }
    pos_ = end_pos;
    return op;
  }

  // Skip a {...} region (strings and nested braces respected).
  void SkipBalanced() {
    if (!TryChar('{')) Fail("expected '{{' to start a region, got {}", Peek());
    int depth = 1;
    while (pos_ < text_.size() && depth > 0) {
      const char c = text_[pos_++];
      if (c == '"') {
        while (pos_ < text_.size() && text_[pos_] != '"' && text_[pos_] != '\n') pos_ += text_[pos_] == '\\' ? 2 : 1;
        ++pos_;
      } else if (c == '/' && pos_ < text_.size() && text_[pos_] == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == '{') {
        if (++depth > kMaxDepth * 4) Fail("nesting deeper than {} levels", kMaxDepth * 4);
      } else if (c == '}') {
        --depth;
      }
    }
    if (depth > 0) Fail("unterminated region: expected '}}'");
  }

  void ParseRegion(Region& region) {
    DepthGuard guard(*this);
    Expect('{', "to start a region");
    SkipSpace();
    Block* block = nullptr;
    for (;;) {
      SkipSpace();
      if (TryChar('}')) break;
      if (pos_ >= text_.size()) Fail("unterminated region: expected '}}'");
      if (text_[pos_] == '^') {
        ++pos_;
        const size_t label = pos_;
        while (pos_ < text_.size() && IsIdentChar(text_[pos_])) ++pos_;
        if (pos_ == label) Fail("expected a block label after '^', got {}", Peek());
        block = &region.AddBlock();
        if (TryChar('(')) {
          if (!TryChar(')')) {
            do {
              SkipSpace();
              const Location at = Here();
              const std::string_view arg = ValueName();
              Expect(':', "after the block argument");
              DefineValue(arg, block->AddArgument(ParseType()), at);
            } while (TryChar(','));
            Expect(')', "to end the block arguments");
          }
        }
        Expect(':', "after the block label");
        continue;
      }
      if (block == nullptr) block = &region.AddBlock();
      block->PushBack(ParseOp());
    }
    if (region.empty()) region.AddBlock();
  }

  IrContext& ctx_;
  std::string_view text_;
  std::string_view file_;
  size_t pos_ = 0;
  size_t loc_pos_ = 0;
  Location loc_{1, 1};
  int depth_ = 0;
  std::unordered_map<std::string, Value> values_;
};

}  // namespace

std::unique_ptr<Program> ParseProgram(IrContext& ctx, std::string_view text, std::string_view file) {
  Parser p(ctx, text, file);
  return p.ParseModule();
}

Type ParseType(IrContext& ctx, std::string_view text) {
  Parser p(ctx, text, "<type>");
  return p.ParseTypeOnly();
}

}  // namespace oar::ir
