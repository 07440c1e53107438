#include "common/text/jinja_template.h"

#include <cmath>
#include <ctime>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "common/text/jinja_ast.h"
#include "common/text/jinja_builtins.h"
#include "common/text/jinja_lexer.h"
#include "common/text/jinja_parser.h"

namespace verl {
namespace jinja {

struct Program {
  std::string source_name;
  NodeList nodes;
};

namespace {

using Kind = JinjaValue::Kind;

constexpr int kMaxMacroDepth = 200;
constexpr int64_t kMaxRange = 100000;  // as Jinja's sandbox (MAX_RANGE)

// Rejects unknown filters and tests up front, so a template that uses one fails when loaded, not when a
// particular conversation reaches it.
absl::Status CheckNames(const Expr* e, const std::string& source_name) {
  if (e == nullptr) return absl::OkStatus();
  if (e->kind == Expr::Kind::kFilter && !IsKnownFilter(e->name)) {
    return absl::UnimplementedError(
        absl::StrCat(source_name, ":", e->line, ":", e->column, ": unknown or unsupported filter '", e->name, "'"));
  }
  if (e->kind == Expr::Kind::kTest && !IsKnownTest(e->name)) {
    return absl::UnimplementedError(
        absl::StrCat(source_name, ":", e->line, ":", e->column, ": unknown or unsupported test '", e->name, "'"));
  }
  for (const ExprPtr& a : e->args) RETURN_IF_ERROR(CheckNames(a.get(), source_name));
  for (const ExprPtr& a : e->keys) RETURN_IF_ERROR(CheckNames(a.get(), source_name));
  for (const auto& kw : e->keywords) RETURN_IF_ERROR(CheckNames(kw.second.get(), source_name));
  return absl::OkStatus();
}

absl::Status CheckNames(const NodeList& nodes, const std::string& source_name) {
  for (const NodePtr& n : nodes) {
    RETURN_IF_ERROR(CheckNames(n->expr.get(), source_name));
    RETURN_IF_ERROR(CheckNames(n->filter.get(), source_name));
    for (const ExprPtr& c : n->conditions) RETURN_IF_ERROR(CheckNames(c.get(), source_name));
    for (const ExprPtr& d : n->defaults) RETURN_IF_ERROR(CheckNames(d.get(), source_name));
    for (const NodeList& b : n->bodies) RETURN_IF_ERROR(CheckNames(b, source_name));
    RETURN_IF_ERROR(CheckNames(n->body, source_name));
    RETURN_IF_ERROR(CheckNames(n->else_body, source_name));
  }
  return absl::OkStatus();
}

absl::StatusOr<JinjaValue> Arithmetic(const std::string& op, const JinjaValue& a, const JinjaValue& b) {
  auto unsupported = [&] {
    return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                                   "' and '", b.TypeName(), "'"));
  };
  const bool ints = (a.kind() == Kind::kInt || a.kind() == Kind::kBool) &&
                    (b.kind() == Kind::kInt || b.kind() == Kind::kBool);
  auto as_int = [](const JinjaValue& v) { return v.kind() == Kind::kBool ? int64_t{v.bool_value()} : v.int_value(); };
  if (op == "+") {
    if (a.is_string() && b.is_string()) return JinjaValue::String(a.string_value() + b.string_value());
    if (a.is_list() && b.is_list()) {
      JinjaValue::List out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return JinjaValue::MakeList(std::move(out));
    }
    if (ints) return JinjaValue::Int(static_cast<int64_t>(static_cast<uint64_t>(as_int(a)) + static_cast<uint64_t>(as_int(b))));
    if (a.is_number() && b.is_number()) return JinjaValue::Float(a.AsDouble() + b.AsDouble());
    return unsupported();
  }
  if (op == "*") {
    const JinjaValue* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
    const JinjaValue* count = seq == &a ? &b : &a;
    if (seq != nullptr && (count->kind() == Kind::kInt || count->kind() == Kind::kBool)) {
      const int64_t n = as_int(*count);
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->string_value();
        return JinjaValue::String(std::move(out));
      }
      JinjaValue::List out;
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->list().begin(), seq->list().end());
      return JinjaValue::MakeList(std::move(out));
    }
    if (ints) return JinjaValue::Int(static_cast<int64_t>(static_cast<uint64_t>(as_int(a)) * static_cast<uint64_t>(as_int(b))));
    if (a.is_number() && b.is_number()) return JinjaValue::Float(a.AsDouble() * b.AsDouble());
    return unsupported();
  }
  if (op == "%" && a.is_string()) {
    return absl::UnimplementedError("'%' string formatting is not supported");
  }
  if (!a.is_number() || !b.is_number()) return unsupported();
  if (op == "-") {
    if (ints) return JinjaValue::Int(static_cast<int64_t>(static_cast<uint64_t>(as_int(a)) - static_cast<uint64_t>(as_int(b))));
    return JinjaValue::Float(a.AsDouble() - b.AsDouble());
  }
  if (op == "/") {
    if (b.AsDouble() == 0.0) return absl::InvalidArgumentError("division by zero");
    return JinjaValue::Float(a.AsDouble() / b.AsDouble());
  }
  if (op == "//" || op == "%") {
    if (b.AsDouble() == 0.0) return absl::InvalidArgumentError(op == "%" ? "modulo by zero" : "division by zero");
    if (ints) {
      const int64_t x = as_int(a);
      const int64_t y = as_int(b);
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;  // floor, as Python
      return op == "//" ? JinjaValue::Int(q) : JinjaValue::Int(x - q * y);
    }
    const double x = a.AsDouble();
    const double y = b.AsDouble();
    const double q = std::floor(x / y);
    return op == "//" ? JinjaValue::Float(q) : JinjaValue::Float(x - q * y);
  }
  if (op == "**") {
    if (ints && as_int(b) >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < as_int(b); ++i) r *= as_int(a);
      return JinjaValue::Int(r);
    }
    return JinjaValue::Float(std::pow(a.AsDouble(), b.AsDouble()));
  }
  return unsupported();
}

std::string FormatTime(const std::string& format, const std::tm& tm) {
  if (format.empty()) return "";
  std::vector<char> buf(256 + format.size() * 8);
  for (int attempt = 0; attempt < 4; ++attempt) {
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
    if (n > 0) return std::string(buf.data(), n);
    buf.resize(buf.size() * 4);
  }
  return "";
}

class Renderer {
 public:
  Renderer(const Program& program, const JinjaRenderOptions& options) : program_(program), options_(options) {}

  absl::StatusOr<std::string> Run(const JinjaValue::Dict& variables) {
    Frame globals;
    AddGlobals(&globals);
    Frame top;
    top.parent = &globals;
    for (const auto& [k, v] : variables) top.vars[k] = v;
    top_ = &top;
    std::string out;
    RETURN_IF_ERROR(Exec(program_.nodes, &top, &out));
    return out;
  }

 private:
  struct Frame {
    absl::flat_hash_map<std::string, JinjaValue> vars;
    Frame* parent = nullptr;
  };
  enum class Flow { kNormal, kBreak, kContinue };

  // Prefixes "source:line:column: " unless the error already names a place in the template (it came from an
  // inner expression or a macro body).
  absl::Status Located(int line, int column, const absl::Status& status) const {
    if (status.ok() || absl::StartsWith(status.message(), absl::StrCat(program_.source_name, ":"))) return status;
    return absl::Status(status.code(), absl::StrCat(program_.source_name, ":", line, ":", column, ": ",
                                                    status.message()));
  }
  template <typename T>
  absl::StatusOr<T> Located(const Expr& e, absl::StatusOr<T> value) const {
    if (value.ok()) return value;
    return Located(e.line, e.column, value.status());
  }

  static JinjaValue Lookup(const Frame* f, const std::string& name) {
    for (; f != nullptr; f = f->parent) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return it->second;
    }
    return JinjaValue::Undefined(absl::StrCat("'", name, "' is undefined"));
  }

  void AddGlobals(Frame* g) {
    g->vars["range"] = JinjaValue::Callable("range", [](JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      std::vector<int64_t> v;
      for (const JinjaValue& x : a.positional) {
        if (x.kind() != Kind::kInt) return absl::InvalidArgumentError("range() arguments must be integers");
        v.push_back(x.int_value());
      }
      if (v.empty() || v.size() > 3) return absl::InvalidArgumentError("range() takes 1 to 3 arguments");
      const int64_t start = v.size() == 1 ? 0 : v[0];
      const int64_t stop = v.size() == 1 ? v[0] : v[1];
      const int64_t step = v.size() == 3 ? v[2] : 1;
      if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
      JinjaValue::List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (static_cast<int64_t>(out.size()) >= kMaxRange) {
          return absl::InvalidArgumentError("range() is too big (more than 100000 items)");
        }
        out.push_back(JinjaValue::Int(i));
      }
      return JinjaValue::MakeList(std::move(out));
    });
    auto make_dict = [](JinjaCallArgs& a) -> absl::StatusOr<JinjaValue::Dict> {
      JinjaValue::Dict d;
      for (const JinjaValue& p : a.positional) {
        if (!p.is_dict()) return absl::InvalidArgumentError("positional arguments must be mappings");
        d.insert(d.end(), p.dict().begin(), p.dict().end());
      }
      for (auto& [k, v] : a.keyword) {
        bool replaced = false;
        for (auto& kv : d) {
          if (kv.first == k) {
            kv.second = v;
            replaced = true;
          }
        }
        if (!replaced) d.emplace_back(k, v);
      }
      return d;
    };
    g->vars["namespace"] = JinjaValue::Callable("namespace", [make_dict](JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      ASSIGN_OR_RETURN(JinjaValue::Dict d, make_dict(a));
      return JinjaValue::MakeNamespace(std::move(d));
    });
    g->vars["dict"] = JinjaValue::Callable("dict", [make_dict](JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      ASSIGN_OR_RETURN(JinjaValue::Dict d, make_dict(a));
      return JinjaValue::MakeDict(std::move(d));
    });
    g->vars["raise_exception"] = JinjaValue::Callable("raise_exception", [](JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      const std::string message = a.positional.empty() ? "" : a.positional[0].ToString();
      return absl::InvalidArgumentError(absl::StrCat("the template raised an exception: ", message));
    });
    const JinjaRenderOptions* options = &options_;
    g->vars["strftime_now"] = JinjaValue::Callable("strftime_now", [options](JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      if (a.positional.empty() || !a.positional[0].is_string()) {
        return absl::InvalidArgumentError("strftime_now(format) needs a format string");
      }
      std::tm tm{};
      if (options->now) {
        tm = options->now();
      } else {
        const std::time_t t = std::time(nullptr);
        localtime_r(&t, &tm);
      }
      return JinjaValue::String(FormatTime(a.positional[0].string_value(), tm));
    });
  }

  absl::Status Exec(const NodeList& nodes, Frame* f, std::string* out) {
    for (const NodePtr& n : nodes) {
      RETURN_IF_ERROR(ExecNode(*n, f, out));
      if (flow_ != Flow::kNormal) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status Assign(const Node& n, const JinjaValue& value, Frame* f) {
    if (n.targets.size() == 1) {
      f->vars[n.targets[0]] = value;
      return absl::OkStatus();
    }
    return Unpack(n.targets, value, f, n.line, n.column);
  }

  absl::Status Unpack(const std::vector<std::string>& targets, const JinjaValue& value, Frame* f, int line,
                      int column) {
    absl::StatusOr<std::vector<JinjaValue>> items = Iterate(value);
    if (!items.ok()) return Located(line, column, items.status());
    if (items->size() != targets.size()) {
      return Located(line, column, absl::InvalidArgumentError(absl::StrCat(
                                       items->size() > targets.size() ? "too many" : "not enough",
                                       " values to unpack (expected ", targets.size(), ", got ", items->size(), ")")));
    }
    for (size_t i = 0; i < targets.size(); ++i) f->vars[targets[i]] = (*items)[i];
    return absl::OkStatus();
  }

  absl::Status ExecNode(const Node& n, Frame* f, std::string* out) {
    switch (n.kind) {
      case Node::Kind::kData:
        out->append(n.text);
        return absl::OkStatus();
      case Node::Kind::kOutput: {
        ASSIGN_OR_RETURN(JinjaValue v, Eval(*n.expr, f));
        if (v.is_string()) {
          out->append(v.string_value());
        } else {
          out->append(v.ToString());
        }
        return absl::OkStatus();
      }
      case Node::Kind::kIf:
        for (size_t i = 0; i < n.conditions.size(); ++i) {
          ASSIGN_OR_RETURN(JinjaValue c, Eval(*n.conditions[i], f));
          if (c.Truthy()) return Exec(n.bodies[i], f, out);
        }
        return Exec(n.else_body, f, out);
      case Node::Kind::kFor:
        return ExecFor(n, f, out);
      case Node::Kind::kSet: {
        ASSIGN_OR_RETURN(JinjaValue v, Eval(*n.expr, f));
        if (!n.attribute.empty()) {
          const JinjaValue target = Lookup(f, n.targets[0]);
          if (target.kind() != Kind::kNamespace) {
            return Located(n.line, n.column,
                           absl::InvalidArgumentError(absl::StrCat("cannot assign attribute '", n.attribute, "' on '",
                                                                   n.targets[0], "': not a namespace()")));
          }
          JinjaValue::Dict& attrs = target.namespace_attrs();
          for (auto& kv : attrs) {
            if (kv.first == n.attribute) {
              kv.second = std::move(v);
              return absl::OkStatus();
            }
          }
          attrs.emplace_back(n.attribute, std::move(v));
          return absl::OkStatus();
        }
        return Assign(n, v, f);
      }
      case Node::Kind::kSetBlock: {
        std::string captured;
        RETURN_IF_ERROR(Exec(n.body, f, &captured));
        f->vars[n.targets[0]] = JinjaValue::String(std::move(captured));
        return absl::OkStatus();
      }
      case Node::Kind::kMacro:
        f->vars[n.name] = MakeMacro(n);
        return absl::OkStatus();
      case Node::Kind::kBreak:
        flow_ = Flow::kBreak;
        return absl::OkStatus();
      case Node::Kind::kContinue:
        flow_ = Flow::kContinue;
        return absl::OkStatus();
      case Node::Kind::kScope:
        return Exec(n.body, f, out);
    }
    return absl::OkStatus();
  }

  absl::Status ExecFor(const Node& n, Frame* f, std::string* out) {
    ASSIGN_OR_RETURN(JinjaValue iterable, Eval(*n.expr, f));
    absl::StatusOr<std::vector<JinjaValue>> all = Iterate(iterable);
    if (!all.ok()) return Located(n.expr->line, n.expr->column, all.status());
    Frame loop_frame;
    loop_frame.parent = f;
    auto bind = [&](const JinjaValue& item) -> absl::Status {
      if (n.targets.size() == 1) {
        loop_frame.vars[n.targets[0]] = item;
        return absl::OkStatus();
      }
      return Unpack(n.targets, item, &loop_frame, n.line, n.column);
    };
    std::vector<JinjaValue> items;
    if (n.filter != nullptr) {
      for (const JinjaValue& item : *all) {
        RETURN_IF_ERROR(bind(item));
        ASSIGN_OR_RETURN(JinjaValue keep, Eval(*n.filter, &loop_frame));
        if (keep.Truthy()) items.push_back(item);
      }
    } else {
      items = *std::move(all);
    }
    if (items.empty()) return Exec(n.else_body, &loop_frame, out);
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      RETURN_IF_ERROR(bind(items[i]));
      JinjaValue::Dict loop = {
          {"index", JinjaValue::Int(i + 1)},
          {"index0", JinjaValue::Int(i)},
          {"revindex", JinjaValue::Int(length - i)},
          {"revindex0", JinjaValue::Int(length - i - 1)},
          {"first", JinjaValue::Bool(i == 0)},
          {"last", JinjaValue::Bool(i == length - 1)},
          {"length", JinjaValue::Int(length)},
          {"depth", JinjaValue::Int(1)},
          {"depth0", JinjaValue::Int(0)},
      };
      if (i > 0) loop.emplace_back("previtem", items[i - 1]);
      if (i + 1 < length) loop.emplace_back("nextitem", items[i + 1]);
      loop_frame.vars["loop"] = JinjaValue::MakeDict(std::move(loop));
      RETURN_IF_ERROR(Exec(n.body, &loop_frame, out));
      if (flow_ == Flow::kBreak) {
        flow_ = Flow::kNormal;
        break;
      }
      flow_ = Flow::kNormal;
    }
    return absl::OkStatus();
  }

  JinjaValue MakeMacro(const Node& n) {
    const Node* node = &n;
    return JinjaValue::Callable(n.name, [this, node](JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      if (depth_ >= kMaxMacroDepth) {
        return Located(node->line, node->column,
                       absl::InvalidArgumentError(absl::StrCat("macro '", node->name, "' recursed too deeply")));
      }
      const size_t n_params = node->targets.size();
      if (a.positional.size() > n_params) {
        return absl::InvalidArgumentError(absl::StrCat("macro '", node->name, "' takes ", n_params,
                                                       " arguments, got ", a.positional.size()));
      }
      Frame frame;
      frame.parent = top_;
      for (size_t i = 0; i < a.positional.size(); ++i) frame.vars[node->targets[i]] = a.positional[i];
      for (auto& [k, v] : a.keyword) {
        bool known = false;
        for (const std::string& p : node->targets) known = known || p == k;
        if (!known) {
          return absl::InvalidArgumentError(absl::StrCat("macro '", node->name, "' has no argument '", k, "'"));
        }
        frame.vars[k] = v;
      }
      const size_t first_default = n_params - node->defaults.size();
      for (size_t i = 0; i < n_params; ++i) {
        if (frame.vars.contains(node->targets[i])) continue;
        if (i >= first_default) {
          ASSIGN_OR_RETURN(frame.vars[node->targets[i]], Eval(*node->defaults[i - first_default], &frame));
        } else {
          frame.vars[node->targets[i]] =
              JinjaValue::Undefined(absl::StrCat("parameter '", node->targets[i], "' was not provided"));
        }
      }
      ++depth_;
      std::string out;
      absl::Status s = Exec(node->body, &frame, &out);
      --depth_;
      flow_ = Flow::kNormal;
      RETURN_IF_ERROR(s);
      return JinjaValue::String(std::move(out));
    });
  }

  absl::StatusOr<JinjaCallArgs> EvalArgs(const Expr& e, size_t first, Frame* f) {
    JinjaCallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) {
      ASSIGN_OR_RETURN(JinjaValue v, Eval(*e.args[i], f));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [k, ex] : e.keywords) {
      ASSIGN_OR_RETURN(JinjaValue v, Eval(*ex, f));
      args.keyword.emplace_back(k, std::move(v));
    }
    return args;
  }

  absl::StatusOr<std::optional<int64_t>> SliceBound(const Expr* e, Frame* f) {
    if (e == nullptr) return std::optional<int64_t>();
    ASSIGN_OR_RETURN(JinjaValue v, Eval(*e, f));
    if (v.is_none()) return std::optional<int64_t>();
    if (v.kind() != Kind::kInt) {
      return Located(e->line, e->column, absl::InvalidArgumentError("slice indices must be integers or None"));
    }
    return std::optional<int64_t>(v.int_value());
  }

  absl::StatusOr<JinjaValue> Eval(const Expr& e, Frame* f) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return Lookup(f, e.name);
      case Expr::Kind::kList: {
        JinjaValue::List items;
        for (const ExprPtr& a : e.args) {
          ASSIGN_OR_RETURN(JinjaValue v, Eval(*a, f));
          items.push_back(std::move(v));
        }
        return JinjaValue::MakeList(std::move(items));
      }
      case Expr::Kind::kDict: {
        JinjaValue::Dict items;
        for (size_t i = 0; i < e.keys.size(); ++i) {
          ASSIGN_OR_RETURN(JinjaValue k, Eval(*e.keys[i], f));
          if (!k.is_string()) {
            return Located(e.keys[i]->line, e.keys[i]->column,
                           absl::UnimplementedError("dict keys must be strings in this Jinja subset"));
          }
          ASSIGN_OR_RETURN(JinjaValue v, Eval(*e.args[i], f));
          bool replaced = false;
          for (auto& kv : items) {
            if (kv.first == k.string_value()) {
              kv.second = v;
              replaced = true;
            }
          }
          if (!replaced) items.emplace_back(k.string_value(), std::move(v));
        }
        return JinjaValue::MakeDict(std::move(items));
      }
      case Expr::Kind::kGetAttr: {
        ASSIGN_OR_RETURN(JinjaValue obj, Eval(*e.args[0], f));
        return Located(e, GetAttribute(obj, e.name));
      }
      case Expr::Kind::kGetItem: {
        ASSIGN_OR_RETURN(JinjaValue obj, Eval(*e.args[0], f));
        ASSIGN_OR_RETURN(JinjaValue key, Eval(*e.args[1], f));
        return Located(e, GetItem(obj, key));
      }
      case Expr::Kind::kSlice: {
        ASSIGN_OR_RETURN(JinjaValue obj, Eval(*e.args[0], f));
        ASSIGN_OR_RETURN(std::optional<int64_t> start, SliceBound(e.args[1].get(), f));
        ASSIGN_OR_RETURN(std::optional<int64_t> stop, SliceBound(e.args[2].get(), f));
        ASSIGN_OR_RETURN(std::optional<int64_t> step, SliceBound(e.args[3].get(), f));
        return Located(e, GetSlice(obj, start, stop, step));
      }
      case Expr::Kind::kCall: {
        ASSIGN_OR_RETURN(JinjaValue callee, Eval(*e.args[0], f));
        if (callee.is_undefined()) {
          return Located(e, absl::StatusOr<JinjaValue>(absl::InvalidArgumentError(callee.undefined_description())));
        }
        if (callee.kind() != Kind::kCallable) {
          return Located(e, absl::StatusOr<JinjaValue>(absl::InvalidArgumentError(
                                absl::StrCat("'", callee.TypeName(), "' object is not callable"))));
        }
        ASSIGN_OR_RETURN(JinjaCallArgs args, EvalArgs(e, 1, f));
        return Located(e, callee.callable_fn()(args));
      }
      case Expr::Kind::kFilter: {
        ASSIGN_OR_RETURN(JinjaValue v, Eval(*e.args[0], f));
        ASSIGN_OR_RETURN(JinjaCallArgs args, EvalArgs(e, 1, f));
        return Located(e, ApplyFilter(e.name, v, args));
      }
      case Expr::Kind::kTest: {
        ASSIGN_OR_RETURN(JinjaValue v, Eval(*e.args[0], f));
        ASSIGN_OR_RETURN(JinjaCallArgs args, EvalArgs(e, 1, f));
        ASSIGN_OR_RETURN(bool r, Located(e, ApplyTest(e.name, v, args)));
        return JinjaValue::Bool(r != e.negated);
      }
      case Expr::Kind::kNeg:
      case Expr::Kind::kPos: {
        ASSIGN_OR_RETURN(JinjaValue v, Eval(*e.args[0], f));
        if (v.is_undefined()) {
          return Located(e, absl::StatusOr<JinjaValue>(absl::InvalidArgumentError(v.undefined_description())));
        }
        if (!v.is_number()) {
          return Located(e, absl::StatusOr<JinjaValue>(absl::InvalidArgumentError(
                                absl::StrCat("bad operand type for unary ", e.kind == Expr::Kind::kNeg ? "-" : "+",
                                             ": '", v.TypeName(), "'"))));
        }
        if (e.kind == Expr::Kind::kPos) return v.kind() == Kind::kBool ? JinjaValue::Int(v.bool_value()) : v;
        if (v.kind() == Kind::kFloat) return JinjaValue::Float(-v.float_value());
        return JinjaValue::Int(-(v.kind() == Kind::kBool ? int64_t{v.bool_value()} : v.int_value()));
      }
      case Expr::Kind::kNot: {
        ASSIGN_OR_RETURN(JinjaValue v, Eval(*e.args[0], f));
        return JinjaValue::Bool(!v.Truthy());
      }
      case Expr::Kind::kAnd:
      case Expr::Kind::kOr: {
        ASSIGN_OR_RETURN(JinjaValue left, Eval(*e.args[0], f));
        if (left.Truthy() == (e.kind == Expr::Kind::kOr)) return left;
        return Eval(*e.args[1], f);
      }
      case Expr::Kind::kBinary: {
        ASSIGN_OR_RETURN(JinjaValue a, Eval(*e.args[0], f));
        ASSIGN_OR_RETURN(JinjaValue b, Eval(*e.args[1], f));
        if (e.name == "~") return JinjaValue::String(a.ToString() + b.ToString());
        for (const JinjaValue* v : {&a, &b}) {
          if (v->is_undefined()) {
            return Located(e, absl::StatusOr<JinjaValue>(absl::InvalidArgumentError(v->undefined_description())));
          }
        }
        return Located(e, Arithmetic(e.name, a, b));
      }
      case Expr::Kind::kCompare: {
        ASSIGN_OR_RETURN(JinjaValue left, Eval(*e.args[0], f));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          ASSIGN_OR_RETURN(JinjaValue right, Eval(*e.args[i + 1], f));
          ASSIGN_OR_RETURN(bool r, Located(e, Compare(e.ops[i], left, right)));
          if (!r) return JinjaValue::Bool(false);
          left = std::move(right);
        }
        return JinjaValue::Bool(true);
      }
      case Expr::Kind::kCondition: {
        ASSIGN_OR_RETURN(JinjaValue c, Eval(*e.args[0], f));
        if (c.Truthy()) return Eval(*e.args[1], f);
        if (e.args[2] == nullptr) return JinjaValue::Undefined("the if-expression has no else branch");
        return Eval(*e.args[2], f);
      }
    }
    return absl::InternalError("unknown expression kind");
  }

  static absl::StatusOr<bool> Compare(const std::string& op, const JinjaValue& a, const JinjaValue& b) {
    if (op == "==") return a.Equals(b);
    if (op == "!=") return !a.Equals(b);
    if (op == "in") return Contains(b, a);
    if (op == "not in") {
      ASSIGN_OR_RETURN(bool in, Contains(b, a));
      return !in;
    }
    for (const JinjaValue* v : {&a, &b}) {
      if (v->is_undefined()) return absl::InvalidArgumentError(v->undefined_description());
    }
    if (op == "<") return JinjaValue::Less(a, b);
    if (op == ">") return JinjaValue::Less(b, a);
    if (op == "<=") {
      ASSIGN_OR_RETURN(bool gt, JinjaValue::Less(b, a));
      return !gt;
    }
    ASSIGN_OR_RETURN(bool lt, JinjaValue::Less(a, b));  // >=
    return !lt;
  }

  const Program& program_;
  const JinjaRenderOptions& options_;
  Frame* top_ = nullptr;
  Flow flow_ = Flow::kNormal;
  int depth_ = 0;
};

}  // namespace
}  // namespace jinja

absl::StatusOr<JinjaTemplate> JinjaTemplate::Parse(std::string_view source, std::string source_name) {
  auto program = std::make_shared<jinja::Program>();
  program->source_name = std::move(source_name);
  ASSIGN_OR_RETURN(std::vector<JinjaToken> tokens, JinjaLexer::Tokenize(source, program->source_name));
  ASSIGN_OR_RETURN(program->nodes, JinjaParser::Parse(tokens, program->source_name));
  RETURN_IF_ERROR(jinja::CheckNames(program->nodes, program->source_name));
  return JinjaTemplate(std::move(program));
}

absl::StatusOr<std::string> JinjaTemplate::Render(const JinjaValue::Dict& variables,
                                                  const JinjaRenderOptions& options) const {
  jinja::Renderer renderer(*program_, options);
  return renderer.Run(variables);
}

const std::string& JinjaTemplate::source_name() const { return program_->source_name; }

}  // namespace verl
