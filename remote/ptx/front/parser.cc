// PTX text -> ParsedModule (program.h). Decoding to the executable program
// is in interp/decoder.cc (Decoder).
#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <set>

#include "remote/ptx/front/program.h"

namespace gpupool::sim {
namespace {

// A token's text is a view into the PTX being parsed, which outlives the parse (a module's
// PTX runs to tens of MB: copying every token's text cost more than the parse).
struct Token {
  enum Kind : uint8_t { kWord, kNumber, kString, kPunct, kEnd };
  Kind kind = kEnd;
  std::string_view text;
  int line = 0;
};

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%' || c == '.';
}

// Splits PTX into tokens; drops comments and the debug directives that have no
// ';'.
std::vector<Token> Tokenize(std::string_view text) {
  std::vector<Token> tokens;
  tokens.reserve(text.size() / 4);  // PTX runs to about one token per 4 to 5 characters
  int line = 1;
  size_t i = 0;
  bool line_start = true;
  while (i < text.size()) {
    char c = text[i];
    if (c == '\n') {
      ++line;
      ++i;
      line_start = true;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      size_t end = text.find("*/", i + 2);
      for (size_t k = i; k < std::min(end, text.size()); ++k) line += text[k] == '\n';
      i = end == std::string_view::npos ? text.size() : end + 2;
      continue;
    }
    if (line_start && c == '.' &&
        (text.substr(i, 5) == ".loc " || text.substr(i, 5) == ".loc\t" || text.substr(i, 6) == ".file " ||
         text.substr(i, 6) == ".file\t")) {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    line_start = false;
    Token token;
    token.line = line;
    if (c == '"') {
      size_t end = i + 1;
      while (end < text.size() && text[end] != '"') end += text[end] == '\\' ? 2 : 1;
      token.kind = Token::kString;
      token.text = text.substr(i + 1, std::min(end, text.size()) - i - 1);
      i = std::min(end + 1, text.size());
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = i;
      while (end < text.size() &&
             (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
              ((text[end] == '+' || text[end] == '-') && end > i && (text[end - 1] == 'e' || text[end - 1] == 'E') &&
               text[i + 1] != 'x' && text[i + 1] != 'X' && text[i + 1] != 'f' && text[i + 1] != 'd'))) {
        ++end;
      }
      token.kind = Token::kNumber;
      token.text = text.substr(i, end - i);
      i = end;
    } else if (IsWordChar(c)) {
      size_t end = i;
      while (end < text.size() && IsWordChar(text[end])) ++end;
      token.kind = Token::kWord;
      token.text = text.substr(i, end - i);
      i = end;
    } else {
      token.kind = Token::kPunct;
      token.text = text.substr(i, 1);
      ++i;
    }
    tokens.push_back(token);
  }
  Token end;
  end.line = line;
  tokens.push_back(end);
  return tokens;
}

uint64_t TypeSize(const std::string& type) {
  if (type == ".pred") return 1;
  if (type.size() < 3) return 0;
  std::string bits = type.substr(2);
  if (type == ".f16x2" || type == ".bf16x2") return 4;
  if (bits == "8") return 1;
  if (bits == "16") return 2;
  if (bits == "32") return 4;
  if (bits == "64") return 8;
  if (type == ".bf16") return 2;
  return 0;
}

bool IsTypeName(const std::string& word) {
  static const std::set<std::string> kTypes = {".b8",  ".b16", ".b32",  ".b64",  ".u8",     ".u16", ".u32",
                                               ".u64", ".s8",  ".s16",  ".s32",  ".s64",    ".f16", ".f16x2",
                                               ".f32", ".f64", ".pred", ".bf16", ".bf16x2", ".b128"};
  return kTypes.count(word) > 0;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Status Run(ParsedModule* module) {
    module_ = module;
    while (Peek().kind != Token::kEnd) {
      GPUPOOL_RETURN_IF_ERROR(TopLevel());
    }
    return Status::OK();
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  Token Next() {
    Token token = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return token;
  }
  bool Accept(const char* text) {
    if (Peek().kind != Token::kEnd && Peek().kind != Token::kString && Peek().text == text) {
      ++pos_;
      return true;
    }
    return false;
  }
  Status Error(const std::string& what) const {
    return Status::InvalidArgument("PTX line " + std::to_string(Peek().line) + ": " + what + " (at '" +
                                   std::string(Peek().text) + "')");
  }
  Status Expect(const char* text) {
    if (!Accept(text)) return Error(std::string("expected '") + text + "'");
    return Status::OK();
  }
  void SkipStatement() {
    int depth = 0;
    while (Peek().kind != Token::kEnd) {
      Token token = Next();
      if (token.kind != Token::kPunct) continue;
      if (token.text == "{") ++depth;
      if (token.text == "}" && --depth <= 0 && depth == 0) return;
      if (token.text == ";" && depth == 0) return;
    }
  }

  Result<uint64_t> Integer() {
    bool negative = Accept("-");
    Token token = Next();
    if (token.kind != Token::kNumber) return Error("expected a number");
    uint64_t value = 0;
    if (!ParseInteger(token.text, &value)) return Error("bad number " + std::string(token.text));
    return negative ? uint64_t{0} - value : value;
  }

  static bool ParseInteger(std::string_view digits, uint64_t* value) {
    std::string text(digits);
    if (!text.empty() && (text.back() == 'U' || text.back() == 'u')) text.pop_back();
    errno = 0;
    char* end = nullptr;
    int base = 10;
    const char* start = text.c_str();
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
      base = 16;
      start += 2;
    } else if (text.size() > 2 && text[0] == '0' && (text[1] == 'b' || text[1] == 'B')) {
      base = 2;
      start += 2;
    } else if (text.size() > 1 && text[0] == '0') {
      base = 8;
    }
    *value = std::strtoull(start, &end, base);
    return end != nullptr && *end == '\0' && errno == 0;
  }

  // State space, alignment, type and name of a declaration such as
  // ".global .align 4 .b8 name[16]" after the state space.
  struct Declaration {
    std::string type;
    uint32_t align = 0;
    std::string name;
    uint64_t count = 1;
    bool is_array = false;
    bool unsized = false;
    int vector = 1;
    std::vector<std::string> names;  // "a, b, c" lists of .reg
    uint64_t range = 0;              // %r<N>
  };

  // A scalar register declaration's width in bits (1 for .pred); 0 for vector registers.
  static uint32_t RegisterBits(const Declaration& decl) {
    if (decl.vector != 1) return 0;
    if (decl.type == ".pred") return 1;
    return static_cast<uint32_t>(TypeSize(decl.type) * 8);
  }

  // `attached`: the qualifiers written against the directive (".b16" of ".reg.b16", as
  // nvcc's inline assembly writes them), read before the ones that follow it.
  Result<Declaration> ParseDeclaration(std::string_view attached = {}) {
    Declaration decl;
    std::vector<std::string> words;
    for (size_t at = 0; at < attached.size();) {
      const size_t next = std::min(attached.find('.', at + 1), attached.size());
      words.emplace_back(attached.substr(at, next - at));
      at = next;
    }
    size_t taken = 0;
    // A kernel parameter's ".ptr [.space] [.align N]" describes what the pointer points to:
    // that alignment is the pointee's, not the parameter's ("u64 .ptr .align 1" is still
    // 8-aligned in the parameter buffer).
    bool pointee = false;
    while (taken < words.size() || (Peek().kind == Token::kWord && Peek().text[0] == '.')) {
      std::string word = taken < words.size() ? words[taken++] : std::string(Next().text);
      if (word == ".align") {
        auto value = Integer();
        if (!value.ok()) return value.status();
        // A power of two, as PTX requires; bounded, so that rounding an offset up to it
        // cannot wrap (the alignment comes from a job's PTX).
        if (!pointee && (*value == 0 || !std::has_single_bit(*value) || *value > kMaxAlign)) {
          return Error(".align " + std::to_string(static_cast<int64_t>(*value)) +
                       ": must be a power of two of at most " + std::to_string(kMaxAlign));
        }
        if (!pointee) decl.align = static_cast<uint32_t>(*value);
      } else if (pointee && (word == ".global" || word == ".const" || word == ".local" || word == ".shared")) {
        // the pointee's state space
      } else if (word == ".ptr") {
        pointee = true;
      } else if (word == ".v2" || word == ".v4" || word == ".v8") {
        decl.vector = word[2] - '0';
      } else if (IsTypeName(word)) {
        decl.type = word;
      } else if (word == ".texref" || word == ".surfref" || word == ".samplerref") {
        decl.type = word;
      } else if (word == ".volatile" || word == ".weak" || word == ".visible" || word == ".extern" ||
                 word == ".common") {
        // attributes the engine does not need
      } else if (word == ".attribute") {
        // ".attribute(.managed)" (a __managed__ variable: the client keeps its host copy
        // coherent), ".attribute(.unified(hi, lo))": where the variable lives is the same
        // device memory to the engine.
        GPUPOOL_RETURN_IF_ERROR(Expect("("));
        for (int depth = 1; depth > 0;) {
          if (Peek().kind == Token::kEnd) return Error("unterminated .attribute(...)");
          std::string_view text = Next().text;
          if (text == "(") ++depth;
          if (text == ")") --depth;
        }
      } else {
        break;  // a name that starts with '.'? not valid PTX
      }
    }
    if (Peek().kind != Token::kWord) return Error("expected a name in a declaration");
    decl.name = Next().text;
    decl.names.push_back(decl.name);
    if (Accept("<")) {
      auto value = Integer();
      if (!value.ok()) return value.status();
      decl.range = *value;
      GPUPOOL_RETURN_IF_ERROR(Expect(">"));
    }
    // Array dimensions, each checked: the sizes come from a job's PTX, and a product or
    // a negative size that wrapped would place the next variable (and its initialiser)
    // outside the module's memory.
    const uint64_t element = TypeSize(decl.type) * static_cast<uint64_t>(decl.vector);
    while (Accept("[")) {
      decl.is_array = true;
      if (Accept("]")) {
        decl.unsized = true;
        continue;
      }
      if (Peek().text == "-") {
        return Error("a negative array size in the declaration of " + decl.name);
      }
      auto value = Integer();
      if (!value.ok()) return value.status();
      const uint64_t limit = kMaxDeclarationBytes / std::max<uint64_t>(element, 1);
      if (*value > limit || (*value != 0 && decl.count > limit / *value)) {
        return Error("the declaration of " + decl.name + " is larger than " + std::to_string(kMaxDeclarationBytes) +
                     " bytes");
      }
      decl.count *= *value;
      GPUPOOL_RETURN_IF_ERROR(Expect("]"));
    }
    // ".reg .b32 a, b, c;" (but not the next ".param" of a parameter list).
    while (Peek().text == "," && Peek(1).kind == Token::kWord && Peek(1).text[0] != '.') {
      Next();
      decl.names.emplace_back(Next().text);
    }
    return decl;
  }

  // Bounded by ParseDeclaration: at most kMaxDeclarationBytes.
  uint64_t DeclarationSize(const Declaration& decl) const { return TypeSize(decl.type) * decl.vector * decl.count; }

  // A .shared variable no larger than a block's shared memory: a larger one could never
  // be placed, and is refused at load rather than when (and whichever tier) a kernel
  // first names it.
  Status CheckShared(const Declaration& decl) const {
    const uint64_t size = DeclarationSize(decl);
    if (size > kMaxSharedBytes) {
      return Error("the .shared variable " + decl.name + " is " + std::to_string(size) + " bytes: more than the " +
                   std::to_string(kMaxSharedBytes) + " bytes of shared memory a block may have");
    }
    return Status::OK();
  }

  // An address in an initialiser: `x`, `generic(x)`, either with `+N`, or a masked byte
  // of one, `0xFF00(generic(x)+N)` (how nvcc writes a pointer inside a .b8 array). The
  // value is filled in at load (PtxModule::InitialBytes).
  Result<Relocation> AddressInitializer(uint64_t offset, uint64_t element) {
    Relocation relocation;
    relocation.offset = offset;
    relocation.size = static_cast<uint32_t>(element);
    bool masked = false;
    if (Peek().kind == Token::kNumber) {
      if (!ParseInteger(Next().text, &relocation.mask) || relocation.mask == 0) {
        return Error("bad mask in an address initialiser");
      }
      GPUPOOL_RETURN_IF_ERROR(Expect("("));
      masked = true;
    }
    bool generic = false;
    if (Peek().text == "generic" && Peek(1).text == "(") {
      Next();
      Next();
      generic = true;
    }
    if (Peek().kind != Token::kWord) return Error("expected a symbol in an address initialiser");
    relocation.symbol = Next().text;
    auto addend = [&]() -> Status {
      while (Peek().text == "+" || Peek().text == "-") {
        bool minus = Next().text == "-";
        uint64_t value = 0;
        if (Peek().kind != Token::kNumber || !ParseInteger(Next().text, &value)) {
          return Error("expected a number after " + relocation.symbol + " in an initialiser");
        }
        // Wrapping, as the address arithmetic itself does.
        relocation.addend =
            static_cast<int64_t>(static_cast<uint64_t>(relocation.addend) + (minus ? uint64_t{0} - value : value));
      }
      return Status::OK();
    };
    GPUPOOL_RETURN_IF_ERROR(addend());
    if (generic) GPUPOOL_RETURN_IF_ERROR(Expect(")"));
    GPUPOOL_RETURN_IF_ERROR(addend());
    if (masked) GPUPOOL_RETURN_IF_ERROR(Expect(")"));
    if (!masked && element < 4) {
      return Error("the address of " + relocation.symbol + " in a " + std::to_string(element * 8) + "-bit initialiser");
    }
    return relocation;
  }

  // Reads "= {1, 2, ...}" or "= 7" into bytes of the variable's element type; addresses
  // of variables and functions into `relocations`.
  Status Initializer(const Declaration& decl, std::vector<uint8_t>* bytes, std::vector<Relocation>* relocations) {
    uint64_t element = TypeSize(decl.type);
    bool is_float = decl.type[1] == 'f';
    std::vector<uint64_t> values;
    std::vector<bool> floats;
    int depth = 0;
    do {
      while (Accept("{")) ++depth;
      if (Peek().kind == Token::kWord || (Peek().kind == Token::kNumber && Peek(1).text == "(")) {
        auto relocation = AddressInitializer(values.size() * element, element);
        if (!relocation.ok()) return relocation.status();
        relocations->push_back(std::move(*relocation));
        values.push_back(0);
        while (depth > 0 && Accept("}")) --depth;
        continue;
      }
      bool negative = Accept("-");
      Token token = Next();
      if (token.kind != Token::kNumber) return Error("expected an initial value");
      uint64_t value = 0;
      if (token.text.size() > 2 && (token.text[1] == 'f' || token.text[1] == 'F') && token.text[0] == '0') {
        uint32_t bits = static_cast<uint32_t>(std::strtoul(std::string(token.text).c_str() + 2, nullptr, 16));
        float f;
        std::memcpy(&f, &bits, 4);
        double d = negative ? -f : f;
        if (element == 8) {
          std::memcpy(&value, &d, 8);
        } else {
          float narrowed = static_cast<float>(d);
          uint32_t out;
          std::memcpy(&out, &narrowed, 4);
          value = out;
        }
      } else if (token.text.size() > 2 && (token.text[1] == 'd' || token.text[1] == 'D') && token.text[0] == '0') {
        value = std::strtoull(std::string(token.text).c_str() + 2, nullptr, 16);
        if (negative) value ^= 1ull << 63;
        if (element == 4) {
          double d;
          std::memcpy(&d, &value, 8);
          float f = static_cast<float>(d);
          uint32_t out;
          std::memcpy(&out, &f, 4);
          value = out;
        }
      } else if (token.text.find_first_of(".eE") != std::string::npos && is_float) {
        double d = std::strtod(std::string(token.text).c_str(), nullptr) * (negative ? -1 : 1);
        if (element == 8) {
          std::memcpy(&value, &d, 8);
        } else {
          float f = static_cast<float>(d);
          uint32_t out;
          std::memcpy(&out, &f, 4);
          value = out;
        }
      } else {
        if (!ParseInteger(token.text, &value)) return Error("bad initial value");
        if (negative) value = uint64_t{0} - value;
        if (is_float) {  // an integer written for a float: its value
          if (element == 8) {
            double d = static_cast<double>(static_cast<int64_t>(value));
            std::memcpy(&value, &d, 8);
          } else {
            float f = static_cast<float>(static_cast<int64_t>(value));
            uint32_t out;
            std::memcpy(&out, &f, 4);
            value = out;
          }
        }
      }
      values.push_back(value);
      while (depth > 0 && Accept("}")) --depth;
    } while (Accept(","));
    while (depth > 0 && Accept("}")) --depth;
    for (uint64_t value : values) {
      for (uint64_t k = 0; k < element; ++k) bytes->push_back(static_cast<uint8_t>(value >> (8 * k)));
    }
    return Status::OK();
  }

  Status ModuleVariableDecl(const std::string& space, bool is_extern) {
    auto decl = ParseDeclaration();
    if (!decl.ok()) return decl.status();
    if (decl->type == ".texref" || decl->type == ".surfref" || decl->type == ".samplerref") {
      module_->unsupported_symbols.push_back(decl->name);
      SkipStatement();
      return Status::OK();
    }
    uint32_t align = decl->align ? decl->align : static_cast<uint32_t>(std::max<uint64_t>(1, TypeSize(decl->type)));
    if (!external_linkage_) module_->local_names.insert(decl->name);
    if (space == ".shared") {
      GPUPOOL_RETURN_IF_ERROR(CheckShared(*decl));
      module_->shared.push_back(SharedVariable{decl->name, DeclarationSize(*decl), align, is_extern || decl->unsized});
      return Expect(";");
    }
    ModuleVariable variable;
    variable.name = decl->name;
    variable.is_const = space == ".const";
    variable.size = DeclarationSize(*decl);
    variable.align = align;
    if (Accept("=")) GPUPOOL_RETURN_IF_ERROR(Initializer(*decl, &variable.init, &variable.relocations));
    // An initialiser fills its variable and no more (the executor copies it into the
    // variable's place among the module's others).
    if (variable.size != 0 && variable.init.size() > variable.size) {
      return Error("the initialiser of " + variable.name + " has " + std::to_string(variable.init.size()) +
                   " bytes, more than its " + std::to_string(variable.size));
    }
    if (variable.init.size() > kMaxDeclarationBytes) {
      return Error("the initialiser of " + variable.name + " is larger than " + std::to_string(kMaxDeclarationBytes) +
                   " bytes");
    }
    if (variable.size == 0) variable.size = std::max<uint64_t>(variable.init.size(), 1);
    if (is_extern && variable.init.empty()) {
      // Declared here, defined in another module: a link (LinkPtxTexts) may define it;
      // alone it cannot be used.
      variable.is_declaration = true;
      module_->unsupported_symbols.push_back(decl->name);
    }
    module_->variables.push_back(std::move(variable));
    return Expect(";");
  }

  // "(.param .b32 a, .param .align 8 .b8 b[16])"
  Status ParamList(std::vector<RawParam>* params) {
    GPUPOOL_RETURN_IF_ERROR(Expect("("));
    if (Accept(")")) return Status::OK();
    do {
      if (!Accept(".param") && !Accept(".reg")) return Error("expected .param");
      auto decl = ParseDeclaration();
      if (!decl.ok()) return decl.status();
      uint64_t size = DeclarationSize(*decl);
      uint32_t align = decl->align ? decl->align : static_cast<uint32_t>(std::max<uint64_t>(1, TypeSize(decl->type)));
      params->push_back(RawParam{decl->name, size, align});
    } while (Accept(","));
    return Expect(")");
  }

  Status FunctionDecl(bool is_entry) {
    RawFunction function;
    function.is_entry = is_entry;
    function.ptx_version = ptx_version_;
    function.target_arch = target_arch_;
    if (!is_entry && Peek().text == "(") GPUPOOL_RETURN_IF_ERROR(ParamList(&function.returns));
    if (Peek().kind != Token::kWord) return Error("expected a function name");
    function.name = Next().text;
    if (Peek().text == "(") GPUPOOL_RETURN_IF_ERROR(ParamList(&function.params));
    // Performance directives (.maxntid 256, 1, 1; .reqntid; .noreturn; .pragma
    // ...). The thread bound is kept: a launch of more threads fails, as on a GPU.
    while (Peek().kind == Token::kWord && Peek().text[0] == '.') {
      const std::string directive(Next().text);
      uint64_t threads = 1;
      std::vector<uint64_t> values;
      while (Peek().kind == Token::kNumber || Peek().text == ",") {
        uint64_t value = 0;
        if (Peek().kind == Token::kNumber) {
          if (!ParseInteger(Peek().text, &value)) return Error("bad number " + std::string(Peek().text));
          // Capped: a bound above 1024 threads bounds nothing.
          threads = std::min<uint64_t>(threads * std::clamp<uint64_t>(value, 1, 1u << 20), 1u << 20);
          values.push_back(value);
        }
        Next();
      }
      if (!values.empty() && (directive == ".maxntid" || directive == ".reqntid")) {
        function.max_threads = static_cast<uint32_t>(threads);
      }
      if (directive == ".reqnctapercluster") {
        // Each dimension 1 to 16 (a cluster has at most 16 blocks; the launch checks the
        // product), missing ones 1.
        if (values.empty() || values.size() > 3) return Error(".reqnctapercluster takes one to three dimensions");
        for (size_t axis = 0; axis < 3; ++axis) {
          const uint64_t value = axis < values.size() ? values[axis] : 1;
          if (value == 0 || value > 16) return Error(".reqnctapercluster dimension " + std::to_string(value));
          function.required_cluster[axis] = static_cast<uint32_t>(value);
        }
      } else if (directive == ".maxclusterrank") {
        if (values.size() != 1 || values[0] == 0) return Error(".maxclusterrank takes one positive count");
        function.max_cluster_rank = static_cast<uint32_t>(std::min<uint64_t>(values[0], 1u << 20));
      }
      if (Peek().kind == Token::kString) Next();
    }
    if (Accept(";")) {
      module_->functions.emplace(function.name, std::move(function));
      return Status::OK();
    }
    if (Peek().text != "{") return Error("expected a function body");
    function.has_body = true;
    if (!external_linkage_) module_->local_names.insert(function.name);
    scopes_.clear();
    scopes_.emplace_back();
    for (const RawParam& param : function.params) scopes_.back()[param.name] = param.name;
    for (const RawParam& param : function.returns) scopes_.back()[param.name] = param.name;
    GPUPOOL_RETURN_IF_ERROR(Block(&function));
    module_->functions[function.name] = std::move(function);
    return Status::OK();
  }

  std::string Declare(const std::string& name) {
    std::string unique = scopes_.size() <= 2 ? name : name + "#" + std::to_string(++unique_);
    scopes_.back()[name] = unique;
    return unique;
  }
  std::string Resolve(std::string_view name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      auto found = scope->find(name);
      if (found != scope->end()) return found->second;
    }
    // A register with a selector (a video instruction's %r1.b0, %r2.h1): identifiers hold
    // no dot, so the part before it is the register, resolved as any other.
    if (const size_t dot = name.find('.'); dot != std::string_view::npos && dot > 0) {
      return Resolve(name.substr(0, dot)) + std::string(name.substr(dot));
    }
    return std::string(name);
  }

  Status Block(RawFunction* function) {
    GPUPOOL_RETURN_IF_ERROR(Expect("{"));
    scopes_.emplace_back();
    while (!Accept("}")) {
      if (Peek().kind == Token::kEnd) return Error("unterminated block");
      if (Peek().text == "{") {
        GPUPOOL_RETURN_IF_ERROR(Block(function));
        continue;
      }
      GPUPOOL_RETURN_IF_ERROR(Statement(function));
    }
    scopes_.pop_back();
    return Status::OK();
  }

  Status Statement(RawFunction* function) {
    const Token& first = Peek();
    int line = first.line;
    // A label is `name:`; `name::` begins an opcode's qualifier (st.shared::cta).
    if (first.kind == Token::kWord && Peek(1).text == ":" && Peek(2).text != ":" && first.text[0] != '.') {
      RawStatement label;
      label.kind = RawStatement::kLabel;
      label.opcode = first.text;
      label.line = line;
      Next();
      Next();
      function->body.push_back(std::move(label));
      return Status::OK();
    }
    if (first.kind == Token::kWord && first.text[0] == '.') {
      std::string directive(Next().text);
      // ".reg.b32 f;" (inline assembly's spelling): the directive, then its type.
      std::string attached;
      for (const char* space : {".reg", ".local", ".shared", ".param"}) {
        const std::string prefix = std::string(space) + ".";
        if (directive.size() > prefix.size() && directive.compare(0, prefix.size(), prefix) == 0) {
          attached = directive.substr(prefix.size() - 1);
          directive = space;
        }
      }
      if (directive == ".reg" || directive == ".local" || directive == ".shared" || directive == ".param") {
        auto decl = ParseDeclaration(attached);
        if (!decl.ok()) return decl.status();
        RawStatement::Kind kind = directive == ".reg"      ? RawStatement::kRegister
                                  : directive == ".local"  ? RawStatement::kLocal
                                  : directive == ".shared" ? RawStatement::kShared
                                                           : RawStatement::kParam;
        uint32_t align = decl->align ? decl->align : static_cast<uint32_t>(std::max<uint64_t>(1, TypeSize(decl->type)));
        if (kind == RawStatement::kRegister) {
          for (const std::string& base : decl->names) {
            if (decl->range > 0) {
              // %r<N>: %r0 .. %r(N-1), one scope entry for the family. The PTX comes from
              // a job: a bound on the names keeps %r<-3> (2^64 - 3) or a thousand %r<1000000>
              // from holding the agent's GPU thread and memory.
              if (decl->range > kMaxRegisterNames || declared_registers_ + decl->range > kMaxRegisterNames) {
                return Error("more than " + std::to_string(kMaxRegisterNames) + " registers declared");
              }
              declared_registers_ += decl->range;
              std::string unique = Declare(base);
              if (uint32_t bits = RegisterBits(*decl)) function->register_bits[unique] = bits;
              for (uint64_t k = 0; k < decl->range; ++k) {
                std::string name = base + std::to_string(k);
                scopes_.back()[name] = unique + "@" + std::to_string(k);
              }
            } else {
              RawStatement reg;
              reg.kind = kind;
              reg.name = Declare(base);
              if (uint32_t bits = RegisterBits(*decl)) function->register_bits[reg.name] = bits;
              reg.line = line;
              function->body.push_back(std::move(reg));
            }
          }
        } else {
          if (kind == RawStatement::kShared) GPUPOOL_RETURN_IF_ERROR(CheckShared(*decl));
          RawStatement var;
          var.kind = kind;
          var.name = Declare(decl->name);
          var.size = DeclarationSize(*decl);
          var.align = align;
          var.line = line;
          function->body.push_back(std::move(var));
        }
        if (Accept("=")) return Error("initialised function-scope variables are not supported");
        return Expect(";");
      }
      // .pragma, .maxnreg and other hints.
      SkipStatement();
      return Status::OK();
    }
    RawStatement inst;
    inst.kind = RawStatement::kInstruction;
    inst.line = line;
    if (Accept("@")) {
      inst.guard_negated = Accept("!");
      if (Peek().kind != Token::kWord) return Error("expected a guard predicate");
      inst.guard = Resolve(Next().text);
    }
    if (Peek().kind != Token::kWord) return Error("expected an instruction");
    inst.opcode = Next().text;
    // Qualifiers with `::` (sm_90 PTX: mbarrier.arrive.shared::cta.b64,
    // ld.global.L2::128B): the tokenizer splits them at the colons; join them back.
    while (Peek().text == ":" && Peek(1).text == ":" &&
           (Peek(2).kind == Token::kWord || Peek(2).kind == Token::kNumber)) {
      Next();
      Next();
      inst.opcode += "::" + std::string(Next().text);
    }
    if (!Accept(";")) {
      do {
        auto operand = Operand();
        if (!operand.ok()) return operand.status();
        inst.operands.push_back(std::move(*operand));
      } while (Accept(","));
      GPUPOOL_RETURN_IF_ERROR(Expect(";"));
    }
    function->body.push_back(std::move(inst));
    return Status::OK();
  }

  Result<RawOperand> Number(bool negative) {
    Token token = Next();
    RawOperand operand;
    const std::string text(token.text);
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'f' || text[1] == 'F')) {
      operand.kind = RawOperand::kF32;
      operand.bits = std::strtoull(text.c_str() + 2, nullptr, 16);
      if (negative) operand.bits ^= 0x80000000u;
      return operand;
    }
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'd' || text[1] == 'D')) {
      operand.kind = RawOperand::kF64;
      operand.bits = std::strtoull(text.c_str() + 2, nullptr, 16);
      if (negative) operand.bits ^= 1ull << 63;
      return operand;
    }
    if (text.find_first_of(".eE") != std::string::npos && text.find_first_of("xX") == std::string::npos) {
      double d = std::strtod(text.c_str(), nullptr) * (negative ? -1 : 1);
      operand.kind = RawOperand::kF64;
      std::memcpy(&operand.bits, &d, 8);
      return operand;
    }
    uint64_t value = 0;
    if (!ParseInteger(text, &value)) return Error("bad number " + text);
    operand.kind = RawOperand::kInt;
    operand.bits = negative ? uint64_t{0} - value : value;
    return operand;
  }

  Result<RawOperand> Operand() {
    RawOperand operand;
    if (Accept("[")) {
      operand.kind = RawOperand::kAddress;
      if (Peek().kind == Token::kWord) operand.name = Resolve(Next().text);
      int64_t offset = 0;
      while (Peek().text == "+" || Peek().text == "-" || Peek().kind == Token::kNumber) {
        bool negative = false;
        if (Accept("+")) negative = false;
        if (Accept("-")) negative = true;
        auto value = Integer();
        if (!value.ok()) return value.status();
        offset += negative ? -static_cast<int64_t>(*value) : static_cast<int64_t>(*value);
      }
      operand.bits = static_cast<uint64_t>(offset);
      // Texture and surface operands: [tex, {coordinates}] (the engine refuses
      // them).
      while (Accept(",")) {
        auto item = Operand();
        if (!item.ok()) return item.status();
        operand.items.push_back(std::move(*item));
      }
      GPUPOOL_RETURN_IF_ERROR(Expect("]"));
      return operand;
    }
    if (Accept("{")) {
      operand.kind = RawOperand::kVector;
      do {
        auto item = Operand();
        if (!item.ok()) return item.status();
        operand.items.push_back(std::move(*item));
      } while (Accept(","));
      GPUPOOL_RETURN_IF_ERROR(Expect("}"));
      return operand;
    }
    if (Accept("(")) {
      operand.kind = RawOperand::kList;
      if (Accept(")")) return operand;
      do {
        auto item = Operand();
        if (!item.ok()) return item.status();
        operand.items.push_back(std::move(*item));
      } while (Accept(","));
      GPUPOOL_RETURN_IF_ERROR(Expect(")"));
      return operand;
    }
    if (Accept("!")) {
      auto inner = Operand();
      if (!inner.ok()) return inner.status();
      inner->negated = true;
      return inner;
    }
    bool negative = Accept("-");
    if (Peek().kind == Token::kNumber) return Number(negative);
    if (Peek().kind == Token::kWord) {
      operand.kind = RawOperand::kName;
      operand.name = Resolve(Next().text);
      if (negative) return Error("negated names are not PTX");
      if (Accept("|")) {
        if (Peek().kind != Token::kWord) return Error("expected a predicate after '|'");
        operand.pair = Resolve(Next().text);
      }
      // "name+4" as a plain operand (mov %rd, sym+4).
      if (Peek().text == "+" && Peek(1).kind == Token::kNumber) {
        Next();
        auto value = Integer();
        if (!value.ok()) return value.status();
        RawOperand address;
        address.kind = RawOperand::kAddress;
        address.name = operand.name;
        address.bits = *value;
        address.negated = true;  // marks "value of sym+offset", not a memory reference
        return address;
      }
      return operand;
    }
    return Error("expected an operand");
  }

  Status TopLevel() {
    bool is_extern = false;
    external_linkage_ = false;
    while (true) {
      const Token& token = Peek();
      if (token.kind != Token::kWord) return Error("unexpected token at module level");
      const std::string_view word = token.text;
      if (word == ".version" || word == ".target" || word == ".address_size") {
        int line = token.line;
        Next();
        // The PTX ISA version ("9.0": 90) and the target ("sm_80", "sm_90a": 80, 90) of
        // the functions that follow (what cudaFuncGetAttributes and cudaRuntimeGetVersion
        // say in device code).
        if (Peek().line == line) {
          const std::string_view value = Peek().text;
          unsigned major = 0, minor = 0;
          if (word == ".version" && std::sscanf(std::string(value).c_str(), "%u.%u", &major, &minor) == 2 &&
              major < 100 && minor < 10) {
            ptx_version_ = major * 10 + minor;
          } else if (word == ".target" && value.substr(0, 3) == "sm_" &&
                     std::sscanf(std::string(value.substr(3)).c_str(), "%u", &major) == 1 && major < 1000) {
            target_arch_ = major;
          }
        }
        while (Peek().kind != Token::kEnd && Peek().line == line) Next();
        return Status::OK();
      }
      if (word == ".visible" || word == ".weak" || word == ".common") {
        Next();
        external_linkage_ = true;
        continue;
      }
      if (word == ".extern") {
        Next();
        is_extern = true;
        external_linkage_ = true;
        continue;
      }
      if (word == ".entry") {
        Next();
        return FunctionDecl(true);
      }
      if (word == ".func") {
        Next();
        return FunctionDecl(false);
      }
      if (word == ".global" || word == ".const" || word == ".shared") {
        Next();
        return ModuleVariableDecl(std::string(word), is_extern);
      }
      if (word == ".section") {  // DWARF sections of -G builds
        Next();
        while (Peek().kind != Token::kEnd && Peek().text != "{") Next();
        SkipStatement();
        return Status::OK();
      }
      if (word == ".alias") {
        SkipStatement();
        return Status::OK();
      }
      if (word == ".pragma") {
        SkipStatement();
        return Status::OK();
      }
      return Error("unknown module-level directive");
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  ParsedModule* module_ = nullptr;
  std::vector<std::map<std::string, std::string, std::less<>>> scopes_;
  // Register names declared by %r<N> ranges in the module so far (bounded: see there).
  static constexpr uint64_t kMaxRegisterNames = uint64_t{1} << 20;
  uint64_t declared_registers_ = 0;
  int unique_ = 0;
  bool external_linkage_ = false;               // the declaration being read is .visible/.weak/.extern
  uint32_t ptx_version_ = 0, target_arch_ = 0;  // of .version and .target (0: none yet)
};

}  // namespace

Result<std::unique_ptr<ParsedModule>> ParsePtxText(std::string_view text) {
  auto module = std::make_unique<ParsedModule>();
  Parser parser(Tokenize(text));
  GPUPOOL_RETURN_IF_ERROR(parser.Run(module.get()));
  return module;
}

namespace {

// Renames module-level symbols (`renames`: old -> new) wherever `module` names them: its
// declarations, initialisers and the operands of its instructions (not names a function
// declares for itself).
void RenameSymbols(ParsedModule* module, const std::map<std::string, std::string>& renames) {
  if (renames.empty()) return;
  auto rename = [&](std::string* name) {
    auto found = renames.find(*name);
    if (found != renames.end()) *name = found->second;
  };
  for (ModuleVariable& variable : module->variables) {
    rename(&variable.name);
    for (Relocation& relocation : variable.relocations) rename(&relocation.symbol);
  }
  for (SharedVariable& variable : module->shared) rename(&variable.name);
  for (std::string& name : module->unsupported_symbols) rename(&name);
  std::set<std::string> local_names;
  for (std::string name : module->local_names) {
    rename(&name);
    local_names.insert(name);
  }
  module->local_names = std::move(local_names);
  std::map<std::string, RawFunction> functions;
  for (auto& [name, function] : module->functions) {
    std::set<std::string> own;  // what the function declares itself
    for (const RawStatement& statement : function.body) {
      if (statement.kind != RawStatement::kInstruction && statement.kind != RawStatement::kLabel)
        own.insert(statement.name);
    }
    for (const RawParam& param : function.params) own.insert(param.name);
    for (const RawParam& param : function.returns) own.insert(param.name);
    auto operand = [&](RawOperand& op, auto&& self) -> void {
      if ((op.kind == RawOperand::kName || op.kind == RawOperand::kAddress) && !own.count(op.name)) rename(&op.name);
      for (RawOperand& item : op.items) self(item, self);
    };
    for (RawStatement& statement : function.body) {
      if (statement.kind != RawStatement::kInstruction) continue;
      for (RawOperand& op : statement.operands) operand(op, operand);
    }
    std::string key = name;
    rename(&key);
    function.name = key;
    functions[key] = std::move(function);
  }
  module->functions = std::move(functions);
}

}  // namespace

// A module links at most this many translation units (the count comes from a job's image).
constexpr size_t kMaxLinkedUnits = 4096;

Result<std::unique_ptr<ParsedModule>> LinkPtxTexts(const std::vector<std::string_view>& texts) {
  std::vector<std::string_view> units;
  for (std::string_view text : texts) {
    if (std::find(units.begin(), units.end(), text) == units.end()) units.push_back(text);
  }
  if (units.empty()) return Status::InvalidArgument("no PTX to link");
  if (units.size() == 1) return ParsePtxText(units[0]);
  if (units.size() > kMaxLinkedUnits) {
    return Status::InvalidArgument(std::to_string(units.size()) + " translation units to link: more than " +
                                   std::to_string(kMaxLinkedUnits));
  }
  std::vector<std::unique_ptr<ParsedModule>> parsed;
  std::vector<std::set<std::string>> names(units.size());
  std::map<std::string, size_t> units_naming;  // how many units name each symbol
  for (size_t i = 0; i < units.size(); ++i) {
    auto unit = ParsePtxText(units[i]);
    if (!unit.ok()) {
      return Status::InvalidArgument("translation unit " + std::to_string(i + 1) + " of " +
                                     std::to_string(units.size()) + ": " + unit.status().message());
    }
    for (const auto& [name, function] : (*unit)->functions) names[i].insert(name);
    for (const ModuleVariable& variable : (*unit)->variables) names[i].insert(variable.name);
    for (const SharedVariable& variable : (*unit)->shared) names[i].insert(variable.name);
    for (const std::string& name : names[i]) ++units_naming[name];
    parsed.push_back(std::move(*unit));
  }
  // A unit's own symbol that another unit also names is renamed apart (string literals,
  // static functions and variables).
  for (size_t i = 0; i < parsed.size(); ++i) {
    std::map<std::string, std::string> renames;
    for (const std::string& name : parsed[i]->local_names) {
      if (units_naming[name] > 1) renames[name] = name + "$unit" + std::to_string(i + 1);
    }
    RenameSymbols(parsed[i].get(), renames);
  }
  auto linked = std::make_unique<ParsedModule>();
  std::set<std::string> defined;
  for (const auto& unit : parsed) {
    for (const ModuleVariable& variable : unit->variables) {
      if (!variable.is_declaration) defined.insert(variable.name);
    }
  }
  std::set<std::string> placed, placed_shared, unsupported;
  for (auto& unit : parsed) {
    for (auto& [name, function] : unit->functions) {
      auto found = linked->functions.find(name);
      if (found == linked->functions.end() || (!found->second.has_body && function.has_body)) {
        linked->functions[name] = std::move(function);
      }
    }
    for (ModuleVariable& variable : unit->variables) {
      if (variable.is_declaration && defined.count(variable.name)) continue;
      if (!placed.insert(variable.name).second) continue;  // a second definition
      linked->variables.push_back(std::move(variable));
    }
    for (SharedVariable& variable : unit->shared) {
      if (placed_shared.insert(variable.name).second) linked->shared.push_back(std::move(variable));
    }
    for (std::string& name : unit->unsupported_symbols) {
      if (!defined.count(name) && unsupported.insert(name).second) {
        linked->unsupported_symbols.push_back(name);
      }
    }
    linked->local_names.insert(unit->local_names.begin(), unit->local_names.end());
  }
  return linked;
}

uint64_t PtxTypeSize(const std::string& type) { return TypeSize(type); }

}  // namespace gpupool::sim
