#ifndef VERL_COMMON_TEXT_JINJA_AST_H_
#define VERL_COMMON_TEXT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/text/jinja_value.h"

namespace verl::jinja {

// The syntax tree of a parsed template (common/text/jinja_parser.h), evaluated by JinjaRenderer. Plain data:
// built once, then read-only and shared by every render.

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // [args...]; tuples are lists too
    kDict,      // {keys[i]: args[i]}
    kGetAttr,   // args[0].name
    kGetItem,   // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]], a missing part is null
    kCall,      // args[0](args[1..], keywords)
    kFilter,    // args[0] | name(args[1..], keywords)
    kTest,      // args[0] is [not] name(args[1..]); `negated`
    kNeg,       // -args[0]
    kPos,       // +args[0]
    kNot,       // not args[0]
    kBinary,    // args[0] op args[1]: + - * / // % ** ~
    kAnd,       // args[0] and args[1]
    kOr,        // args[0] or args[1]
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < > <= >= in, "not in"
    kCondition  // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  int column = 0;
  JinjaValue value;
  std::string name;  // name, attribute, filter, test or binary operator
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<ExprPtr> keys;
  std::vector<std::string> ops;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kData,      // text
    kOutput,    // {{ expr }}
    kIf,        // conditions[i] -> bodies[i]; else_body
    kFor,       // for targets in expr [if filter]: body; else_body
    kSet,       // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,  // {% set targets[0] %}body{% endset %}
    kMacro,     // macro name(targets, defaults aligned to the end): body
    kBreak,
    kContinue,
    kScope,     // a body rendered as is: {% generation %}...{% endgeneration %}
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<ExprPtr> conditions;
  std::vector<NodeList> bodies;
  NodeList body;
  NodeList else_body;
  std::vector<std::string> targets;
  std::string attribute;
  std::string name;
  std::vector<ExprPtr> defaults;
};

}  // namespace verl::jinja

#endif  // VERL_COMMON_TEXT_JINJA_AST_H_
