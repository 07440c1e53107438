#include "common/text/jinja_parser.h"

#include <cstdlib>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace verl {
namespace {

using jinja::Expr;
using jinja::ExprPtr;
using jinja::Node;
using jinja::NodeList;
using jinja::NodePtr;
using Type = JinjaToken::Type;

class Parser {
 public:
  Parser(const std::vector<JinjaToken>& tokens, std::string_view name) : tokens_(tokens), name_(name) {}

  absl::StatusOr<NodeList> ParseTemplate() {
    std::string stopped_at;
    ASSIGN_OR_RETURN(NodeList nodes, ParseBody({}, &stopped_at));
    return nodes;
  }

 private:
  const JinjaToken& Cur() const { return tokens_[pos_]; }
  const JinjaToken& Peek(size_t ahead = 1) const {
    return tokens_[pos_ + ahead < tokens_.size() ? pos_ + ahead : tokens_.size() - 1];
  }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const { return Cur().type == Type::kOperator && Cur().text == op; }
  bool IsName(std::string_view name) const { return Cur().type == Type::kName && Cur().text == name; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  absl::Status ErrorAt(const JinjaToken& t, const std::string& message, bool unimplemented = false) const {
    std::string text = absl::StrCat(name_, ":", t.line, ":", t.column, ": ", message);
    return unimplemented ? absl::UnimplementedError(text) : absl::InvalidArgumentError(text);
  }
  static std::string Describe(const JinjaToken& t) {
    switch (t.type) {
      case Type::kEnd:
        return "end of template";
      case Type::kBlockEnd:
        return "'%}'";
      case Type::kVariableEnd:
        return "'}}'";
      case Type::kString:
        return "a string";
      default:
        return absl::StrCat("'", t.text, "'");
    }
  }
  absl::Status Unexpected(const std::string& expected) const {
    return ErrorAt(Cur(), absl::StrCat("expected ", expected, ", got ", Describe(Cur())));
  }
  absl::Status ExpectOp(const std::string& op) {
    if (!SkipOp(op)) return Unexpected(absl::StrCat("'", op, "'"));
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().type != Type::kBlockEnd) return Unexpected("'%}'");
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != Type::kName) return Unexpected("a name");
    std::string n = Cur().text;
    Next();
    return n;
  }

  ExprPtr MakeExpr(Expr::Kind kind, const JinjaToken& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  // ---- statements ----

  // Parses nodes until a block tag whose name is in `ends` (left unconsumed, its name in *stopped_at) or the end
  // of the template (an error when `ends` is not empty).
  absl::StatusOr<NodeList> ParseBody(const std::set<std::string>& ends, std::string* stopped_at) {
    const std::set<std::string>* saved_ends = open_ends_;
    open_ends_ = &ends;
    absl::StatusOr<NodeList> nodes = ParseBodyIn(ends, stopped_at);
    open_ends_ = saved_ends;
    return nodes;
  }

  static std::string EndList(const std::set<std::string>& ends) {
    std::string list;
    for (const std::string& e : ends) list += (list.empty() ? "'" : " or '") + e + "'";
    return list;
  }

  absl::StatusOr<NodeList> ParseBodyIn(const std::set<std::string>& ends, std::string* stopped_at) {
    NodeList nodes;
    while (true) {
      const JinjaToken& t = Cur();
      if (t.type == Type::kEnd) {
        if (!ends.empty()) {
          return ErrorAt(t, absl::StrCat("unexpected end of template, expected ", EndList(ends), " (to close the tag at ",
                                         open_line_, ":", open_column_, ")"));
        }
        return nodes;
      }
      if (t.type == Type::kData) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kData;
        n->text = t.text;
        nodes.push_back(std::move(n));
        Next();
        continue;
      }
      if (t.type == Type::kVariableBegin) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = t.line;
        n->column = t.column;
        Next();
        ASSIGN_OR_RETURN(n->expr, ParseTupleExpression());
        if (Cur().type != Type::kVariableEnd) return Unexpected("'}}'");
        Next();
        nodes.push_back(std::move(n));
        continue;
      }
      if (t.type == Type::kBlockBegin) {
        const JinjaToken& tag = Peek();
        if (tag.type == Type::kName && ends.count(tag.text)) {
          Next();
          *stopped_at = tag.text;
          return nodes;
        }
        Next();
        ASSIGN_OR_RETURN(NodePtr n, ParseStatement());
        if (n != nullptr) nodes.push_back(std::move(n));
        continue;
      }
      return ErrorAt(t, absl::StrCat("unexpected ", Describe(t)));
    }
  }

  // Consumes `{% name ... %}` of the end tag whose name ParseBody stopped at (Cur() is the name).
  absl::Status FinishEndTag() {
    Next();
    return ExpectBlockEnd();
  }

  absl::StatusOr<NodePtr> ParseStatement() {
    const JinjaToken tag = Cur();
    if (tag.type != Type::kName) return ErrorAt(tag, "expected a tag name after '{%'");
    const std::string& n = tag.text;
    const int saved_line = open_line_;
    const int saved_column = open_column_;
    open_line_ = tag.line;
    open_column_ = tag.column;
    absl::StatusOr<NodePtr> node;
    if (n == "if") {
      node = ParseIf();
    } else if (n == "for") {
      node = ParseFor();
    } else if (n == "set") {
      node = ParseSet();
    } else if (n == "macro") {
      node = ParseMacro();
    } else if (n == "generation") {
      node = ParseScope("endgeneration");
    } else if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) return ErrorAt(tag, absl::StrCat("'", n, "' outside of a loop"));
      Next();
      auto out = std::make_unique<Node>();
      out->kind = n == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      RETURN_IF_ERROR(ExpectBlockEnd());
      node = std::move(out);
    } else if (n == "include" || n == "extends" || n == "import" || n == "from" || n == "block" || n == "call" ||
               n == "filter" || n == "with" || n == "do" || n == "autoescape") {
      return ErrorAt(tag, absl::StrCat("the '", n, "' tag is not supported"), /*unimplemented=*/true);
    } else if (n.rfind("end", 0) == 0 || n == "elif" || n == "else") {
      std::string expected = " with no open block";
      if (open_ends_ != nullptr && !open_ends_->empty()) expected = absl::StrCat("; expected ", EndList(*open_ends_));
      return ErrorAt(tag, absl::StrCat("unexpected '", n, "'", expected));
    } else {
      return ErrorAt(tag, absl::StrCat("unknown tag '", n, "'"));
    }
    open_line_ = saved_line;
    open_column_ = saved_column;
    if (node.ok()) {
      (*node)->line = tag.line;
      (*node)->column = tag.column;
    }
    return node;
  }

  absl::StatusOr<NodePtr> ParseIf() {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kIf;
    Next();  // if
    while (true) {
      ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression());
      RETURN_IF_ERROR(ExpectBlockEnd());
      std::string stopped;
      ASSIGN_OR_RETURN(NodeList body, ParseBody({"elif", "else", "endif"}, &stopped));
      node->conditions.push_back(std::move(cond));
      node->bodies.push_back(std::move(body));
      if (stopped == "elif") {
        Next();
        continue;
      }
      if (stopped == "else") {
        RETURN_IF_ERROR(FinishEndTag());
        ASSIGN_OR_RETURN(node->else_body, ParseBody({"endif"}, &stopped));
      }
      RETURN_IF_ERROR(FinishEndTag());
      return node;
    }
  }

  absl::StatusOr<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> targets;
    const bool paren = SkipOp("(");
    do {
      ASSIGN_OR_RETURN(std::string t, ExpectName());
      targets.push_back(std::move(t));
    } while (SkipOp(","));
    if (paren) RETURN_IF_ERROR(ExpectOp(")"));
    return targets;
  }

  absl::StatusOr<NodePtr> ParseFor() {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kFor;
    Next();  // for
    ASSIGN_OR_RETURN(node->targets, ParseTargets());
    if (!SkipName("in")) return Unexpected("'in'");
    ASSIGN_OR_RETURN(node->expr, ParseOr());
    if (SkipName("if")) {
      ASSIGN_OR_RETURN(node->filter, ParseExpression());
    }
    if (IsName("recursive")) return ErrorAt(Cur(), "recursive loops are not supported", /*unimplemented=*/true);
    RETURN_IF_ERROR(ExpectBlockEnd());
    ++loop_depth_;
    std::string stopped;
    absl::StatusOr<NodeList> body = ParseBody({"else", "endfor"}, &stopped);
    --loop_depth_;
    if (!body.ok()) return body.status();
    node->body = *std::move(body);
    if (stopped == "else") {
      RETURN_IF_ERROR(FinishEndTag());
      ASSIGN_OR_RETURN(node->else_body, ParseBody({"endfor"}, &stopped));
    }
    RETURN_IF_ERROR(FinishEndTag());
    return node;
  }

  absl::StatusOr<NodePtr> ParseSet() {
    auto node = std::make_unique<Node>();
    Next();  // set
    ASSIGN_OR_RETURN(std::string first, ExpectName());
    node->targets.push_back(first);
    if (SkipOp(".")) {
      ASSIGN_OR_RETURN(node->attribute, ExpectName());
    } else {
      while (SkipOp(",")) {
        ASSIGN_OR_RETURN(std::string t, ExpectName());
        node->targets.push_back(std::move(t));
      }
    }
    if (SkipOp("=")) {
      node->kind = Node::Kind::kSet;
      ASSIGN_OR_RETURN(node->expr, ParseTupleExpression());
      RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    if (node->targets.size() != 1 || !node->attribute.empty()) return Unexpected("'='");
    if (Cur().type != Type::kBlockEnd) {
      return ErrorAt(Cur(), "a filter on a block set is not supported", /*unimplemented=*/true);
    }
    Next();
    node->kind = Node::Kind::kSetBlock;
    std::string stopped;
    ASSIGN_OR_RETURN(node->body, ParseBody({"endset"}, &stopped));
    RETURN_IF_ERROR(FinishEndTag());
    return node;
  }

  absl::StatusOr<NodePtr> ParseMacro() {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kMacro;
    Next();  // macro
    ASSIGN_OR_RETURN(node->name, ExpectName());
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!node->targets.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      ASSIGN_OR_RETURN(std::string param, ExpectName());
      node->targets.push_back(std::move(param));
      if (SkipOp("=")) {
        ASSIGN_OR_RETURN(ExprPtr d, ParseExpression());
        node->defaults.push_back(std::move(d));
      } else if (!node->defaults.empty()) {
        return ErrorAt(Cur(), "a parameter without a default follows one with a default");
      }
    }
    Next();  // )
    RETURN_IF_ERROR(ExpectBlockEnd());
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;
    std::string stopped;
    absl::StatusOr<NodeList> body = ParseBody({"endmacro"}, &stopped);
    loop_depth_ = saved_depth;
    if (!body.ok()) return body.status();
    node->body = *std::move(body);
    RETURN_IF_ERROR(FinishEndTag());
    return node;
  }

  absl::StatusOr<NodePtr> ParseScope(const std::string& end) {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kScope;
    Next();
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string stopped;
    ASSIGN_OR_RETURN(node->body, ParseBody({end}, &stopped));
    RETURN_IF_ERROR(FinishEndTag());
    return node;
  }

  // ---- expressions ----

  // An expression, or a tuple "a, b" (a list) as in {{ a, b }} and {% set x = 1, 2 %}.
  absl::StatusOr<ExprPtr> ParseTupleExpression() {
    const JinjaToken start = Cur();
    ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
    if (!IsOp(",")) return first;
    ExprPtr list = MakeExpr(Expr::Kind::kList, start);
    list->args.push_back(std::move(first));
    while (SkipOp(",")) {
      if (Cur().type == Type::kBlockEnd || Cur().type == Type::kVariableEnd) break;
      ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
      list->args.push_back(std::move(e));
    }
    return list;
  }

  absl::StatusOr<ExprPtr> ParseExpression() {
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      const JinjaToken at = Cur();
      Next();
      ExprPtr cond = MakeExpr(Expr::Kind::kCondition, at);
      ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (SkipName("else")) {
        ASSIGN_OR_RETURN(otherwise, ParseExpression());
      }
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(expr));
      cond->args.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      ExprPtr e = MakeExpr(Expr::Kind::kOr, Cur());
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      ExprPtr e = MakeExpr(Expr::Kind::kAnd, Cur());
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      ExprPtr e = MakeExpr(Expr::Kind::kNot, Cur());
      Next();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      e->args.push_back(std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const JinjaToken start = Cur();
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == Type::kOperator &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == ">" ||
           Cur().text == "<=" || Cur().text == ">=")) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == Type::kName && Peek().text == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      if (cmp == nullptr) {
        cmp = MakeExpr(Expr::Kind::kCompare, start);
        cmp->args.push_back(std::move(first));
      }
      ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(right));
    }
    return cmp != nullptr ? std::move(cmp) : std::move(first);
  }

  absl::StatusOr<ExprPtr> Binary(ExprPtr left, const JinjaToken& op_token, ExprPtr right) {
    ExprPtr e = MakeExpr(Expr::Kind::kBinary, op_token);
    e->name = op_token.text;
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const JinjaToken op = Cur();
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), op, std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      const JinjaToken op = Cur();
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), op, std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const JinjaToken op = Cur();
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), op, std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      const JinjaToken op = Cur();
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      ASSIGN_OR_RETURN(left, Binary(std::move(left), op, std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = MakeExpr(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Cur());
      Next();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->args.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const JinjaToken t = Cur();
    switch (t.type) {
      case Type::kName: {
        Next();
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, t);
        if (t.text == "true" || t.text == "True") {
          e->value = JinjaValue::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = JinjaValue::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = JinjaValue::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case Type::kString: {
        std::string s;
        while (Cur().type == Type::kString) {  // adjacent literals concatenate: 'a' 'b'
          s += Cur().text;
          Next();
        }
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, t);
        e->value = JinjaValue::String(std::move(s));
        return e;
      }
      case Type::kInt: {
        Next();
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, t);
        e->value = JinjaValue::Int(std::strtoll(t.text.c_str(), nullptr, 10));
        return e;
      }
      case Type::kFloat: {
        Next();
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, t);
        e->value = JinjaValue::Float(std::strtod(t.text.c_str(), nullptr));
        return e;
      }
      case Type::kOperator:
        if (t.text == "(") {
          Next();
          if (SkipOp(")")) return MakeExpr(Expr::Kind::kList, t);  // ()
          ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
          if (SkipOp(")")) return first;
          ExprPtr list = MakeExpr(Expr::Kind::kList, t);
          list->args.push_back(std::move(first));
          while (SkipOp(",")) {
            if (IsOp(")")) break;
            ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
            list->args.push_back(std::move(e));
          }
          RETURN_IF_ERROR(ExpectOp(")"));
          return list;
        }
        if (t.text == "[") {
          Next();
          ExprPtr list = MakeExpr(Expr::Kind::kList, t);
          while (!IsOp("]")) {
            if (!list->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("]")) break;
            ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
            list->args.push_back(std::move(e));
          }
          Next();
          return list;
        }
        if (t.text == "{") {
          Next();
          ExprPtr dict = MakeExpr(Expr::Kind::kDict, t);
          while (!IsOp("}")) {
            if (!dict->keys.empty()) RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("}")) break;
            ASSIGN_OR_RETURN(ExprPtr k, ParseExpression());
            RETURN_IF_ERROR(ExpectOp(":"));
            ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
            dict->keys.push_back(std::move(k));
            dict->args.push_back(std::move(v));
          }
          Next();
          return dict;
        }
        break;
      default:
        break;
    }
    return ErrorAt(t, absl::StrCat("unexpected ", Describe(t), " in an expression"));
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const JinjaToken at = Cur();
        Next();
        if (Cur().type == Type::kInt) {  // foo.0 is foo[0]
          ExprPtr item = MakeExpr(Expr::Kind::kGetItem, at);
          ExprPtr index = MakeExpr(Expr::Kind::kLiteral, Cur());
          index->value = JinjaValue::Int(std::strtoll(Cur().text.c_str(), nullptr, 10));
          Next();
          item->args.push_back(std::move(node));
          item->args.push_back(std::move(index));
          node = std::move(item);
          continue;
        }
        ASSIGN_OR_RETURN(std::string attr, ExpectName());
        ExprPtr e = MakeExpr(Expr::Kind::kGetAttr, at);
        e->name = std::move(attr);
        e->args.push_back(std::move(node));
        node = std::move(e);
      } else if (IsOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    const JinjaToken at = Cur();
    Next();  // [
    ExprPtr parts[3];
    bool is_slice = false;
    int part = 0;
    while (true) {
      if (IsOp(":")) {
        is_slice = true;
        if (++part > 2) return ErrorAt(Cur(), "a slice has at most two ':'");
        Next();
        continue;
      }
      if (IsOp("]")) break;
      if (parts[part] != nullptr) return Unexpected("':' or ']'");
      ASSIGN_OR_RETURN(parts[part], ParseExpression());
    }
    Next();  // ]
    if (!is_slice) {
      if (parts[0] == nullptr) return ErrorAt(at, "empty subscript");
      ExprPtr e = MakeExpr(Expr::Kind::kGetItem, at);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    ExprPtr e = MakeExpr(Expr::Kind::kSlice, at);
    e->args.push_back(std::move(node));
    for (ExprPtr& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // Arguments of a call, filter or test: (a, b, key=c). Cur() is "(".
  absl::Status ParseCallArgs(Expr* call) {
    Next();  // (
    bool first = true;
    while (!IsOp(")")) {
      if (!first) RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) return ErrorAt(Cur(), "*args and **kwargs are not supported", true);
      if (Cur().type == Type::kName && Peek().type == Type::kOperator && Peek().text == "=") {
        std::string key = Cur().text;
        Next();
        Next();
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        call->keywords.emplace_back(std::move(key), std::move(v));
      } else {
        if (!call->keywords.empty()) return ErrorAt(Cur(), "a positional argument follows a keyword argument");
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        call->args.push_back(std::move(v));
      }
    }
    Next();  // )
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr call = MakeExpr(Expr::Kind::kCall, Cur());
    call->args.push_back(std::move(callee));
    RETURN_IF_ERROR(ParseCallArgs(call.get()));
    return call;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        Next();
        const JinjaToken at = Cur();
        ASSIGN_OR_RETURN(std::string name, ExpectName());
        while (SkipOp(".")) {
          ASSIGN_OR_RETURN(std::string part, ExpectName());
          name += "." + part;
        }
        ExprPtr f = MakeExpr(Expr::Kind::kFilter, at);
        f->name = std::move(name);
        f->args.push_back(std::move(node));
        if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(f.get()));
        node = std::move(f);
      } else if (IsName("is")) {
        Next();
        const bool negated = SkipName("not");
        const JinjaToken at = Cur();
        ASSIGN_OR_RETURN(std::string name, ExpectName());
        ExprPtr t = MakeExpr(Expr::Kind::kTest, at);
        t->name = std::move(name);
        t->negated = negated;
        t->args.push_back(std::move(node));
        if (IsOp("(")) {
          RETURN_IF_ERROR(ParseCallArgs(t.get()));
        } else if ((Cur().type == Type::kName || Cur().type == Type::kString || Cur().type == Type::kInt ||
                    Cur().type == Type::kFloat || IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if") && !IsName("is")) {
          // A test takes one argument without parentheses: `x is divisibleby 3`, `x is sameas none`.
          ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          t->args.push_back(std::move(arg));
        }
        node = std::move(t);
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  const std::vector<JinjaToken>& tokens_;
  std::string name_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  const std::set<std::string>* open_ends_ = nullptr;
  int open_line_ = 0;
  int open_column_ = 0;
};

}  // namespace

absl::StatusOr<jinja::NodeList> JinjaParser::Parse(const std::vector<JinjaToken>& tokens,
                                                   std::string_view source_name) {
  if (tokens.empty()) return jinja::NodeList{};
  Parser parser(tokens, source_name);
  return parser.ParseTemplate();
}

}  // namespace verl
