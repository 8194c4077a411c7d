// A partition's program read and carried out: the calls backend/native/program.py encodes, made
// on a new Partition. Each call is its method's name (a string), its argument count, then its
// arguments, each with a tag that says its type; an argument of the wrong type, a name that is
// no enum value, a call the runtime does not have, all fail with the call and argument named:
// a program is the Python side's output and a mismatch is its bug, never a guess here.
#include "native.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace af {

namespace {

enum Tag : int64_t { Int = 0, Float = 1, List = 2, ActList = 3, Name = 4, Kernel = 5 };

// one call: its method and where each argument's tag is in the words
struct Call {
  std::string method;
  std::vector<const int64_t*> args;
  const char* const* strings;
  const KernelFn* kernels;

  [[noreturn]] void wrong(size_t k, const char* what) const {
    throw std::runtime_error("program: " + method + "'s argument " + std::to_string(k) + " is not " + what);
  }
  const int64_t* arg(size_t k, Tag tag, const char* what) const {
    if (k >= args.size() || args[k][0] != tag) wrong(k, what);
    return args[k] + 1;
  }
  bool has(size_t k) const { return k < args.size(); }
  int64_t i(size_t k) const { return *arg(k, Int, "an int"); }
  bool flag(size_t k, bool otherwise = false) const { return has(k) ? i(k) != 0 : otherwise; }
  float f(size_t k) const;
  Dims dims(size_t k) const {
    const int64_t* p = arg(k, List, "a list");
    return Dims(p + 1, p + 1 + p[0]);
  }
  std::vector<int> ids(size_t k) const {
    const Dims d = dims(k);
    return std::vector<int>(d.begin(), d.end());
  }
  std::string name(size_t k) const { return strings[*arg(k, Name, "a name")]; }
  Acts acts(size_t k) const;
  KernelFn kernel(size_t k) const { return kernels[*arg(k, Kernel, "a kernel")]; }
};

float float_bits(int64_t word) {
  const int32_t bits = int32_t(word);
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// an enum value by the name its list (native.h) spells it with
template <class E>
E named(const std::string& name, const std::vector<std::pair<std::string, E>>& values, const char* what) {
  for (const auto& [n, v] : values)
    if (n == name) return v;
  throw std::runtime_error(std::string("program: '") + name + "' is no " + what);
}

#define AF_NAMED(E, name) {#name, E::name},
Alg alg(const std::string& name) {
  static const std::vector<std::pair<std::string, Alg>> values{
#define AF_ALG(name, onednn, gate) AF_NAMED(Alg, name)
      AF_ALGS(AF_ALG)
#undef AF_ALG
  };
  return named(name, values, "activation");
}

// the enums a program qualifies: "Pool::Max", "Bin::Add", "Layout::Plain", "Precision::BF16"
template <class E>
E qualified(const std::string& name, const char* kind,
            const std::vector<std::pair<std::string, E>>& values) {
  const std::string prefix = std::string(kind) + "::";
  if (name.rfind(prefix, 0) != 0) throw std::runtime_error("program: '" + name + "' is no " + kind);
  return named(name.substr(prefix.size()), values, kind);
}

Pool pool(const std::string& name) {
  static const std::vector<std::pair<std::string, Pool>> values{
#define AF_POOL(name) AF_NAMED(Pool, name)
      AF_POOLS(AF_POOL)
#undef AF_POOL
  };
  return qualified(name, "Pool", values);
}

PadMode pad_mode(const std::string& name) {
  static const std::vector<std::pair<std::string, PadMode>> values{
#define AF_PAD_MODE(name) AF_NAMED(PadMode, name)
      AF_PAD_MODES(AF_PAD_MODE)
#undef AF_PAD_MODE
  };
  return qualified(name, "PadMode", values);
}

Bin bin(const std::string& name) {
  static const std::vector<std::pair<std::string, Bin>> values{
#define AF_BIN(name) AF_NAMED(Bin, name)
      AF_BINS(AF_BIN)
#undef AF_BIN
  };
  return qualified(name, "Bin", values);
}

Reduce reduce(const std::string& name) {
  static const std::vector<std::pair<std::string, Reduce>> values{
#define AF_REDUCE(name) AF_NAMED(Reduce, name)
      AF_REDUCES(AF_REDUCE)
#undef AF_REDUCE
  };
  return qualified(name, "Reduce", values);
}

Layout layout(const std::string& name) {
  static const std::vector<std::pair<std::string, Layout>> values{
#define AF_LAYOUT(name) AF_NAMED(Layout, name)
      AF_LAYOUTS(AF_LAYOUT)
#undef AF_LAYOUT
  };
  return qualified(name, "Layout", values);
}

Type type(const std::string& name) {
  static const std::vector<std::pair<std::string, Type>> values{
#define AF_TYPE(name) AF_NAMED(Type, name)
      AF_TYPES(AF_TYPE)
#undef AF_TYPE
  };
  return qualified(name, "Type", values);
}

Precision precision(const std::string& name) {
  static const std::vector<std::pair<std::string, Precision>> values{
#define AF_PRECISION(name) AF_NAMED(Precision, name)
      AF_PRECISIONS(AF_PRECISION)
#undef AF_PRECISION
  };
  return qualified(name, "Precision", values);
}
#undef AF_NAMED

float Call::f(size_t k) const { return float_bits(*arg(k, Float, "a float")); }

Acts Call::acts(size_t k) const {
  const int64_t* p = arg(k, ActList, "a list of activations");
  Acts out;
  for (int64_t j = 0; j < p[0]; ++j) {
    const int64_t* a = p + 1 + 3 * j;
    out.push_back(Act{alg(strings[a[0]]), float_bits(a[1]), float_bits(a[2])});
  }
  return out;
}

// the words an argument takes, its tag included
int64_t width(const int64_t* a) {
  switch (a[0]) {
    case Int: case Float: case Name: case Kernel: return 2;
    case List: return 2 + a[1];
    case ActList: return 2 + 3 * a[1];
  }
  throw std::runtime_error("program: an argument tagged " + std::to_string(a[0]));
}

void make(Partition& p, const Call& c) {
  const std::string& m = c.method;
  if (m == "input") p.input(c.i(0), c.i(1), c.dims(2));
  else if (m == "output") p.output(c.i(0), c.i(1), c.dims(2));
  else if (m == "constant") p.constant(c.i(0), c.i(1), c.dims(2), c.has(3) ? c.dims(3) : Dims{});
  else if (m == "value")
    p.value(c.i(0), c.dims(1), c.i(2), c.i(3), layout(c.name(4)), c.flag(5), c.has(6) ? c.dims(6) : Dims{});
  else if (m == "typed") p.typed(c.i(0), type(c.name(1)));
  else if (m == "node") {
    const std::string name = c.name(0);
    p.node(name.c_str(), c.has(1) ? precision(c.name(1)) : Precision::F32);
  } else if (m == "conv")
    p.conv(c.i(0), c.i(1), c.i(2), c.i(3), c.i(4), c.dims(5), c.dims(6), c.dims(7), c.dims(8), c.i(9),
           c.acts(10), c.flag(11));
  else if (m == "deconv")
    p.deconv(c.i(0), c.i(1), c.i(2), c.i(3), c.dims(4), c.dims(5), c.dims(6), c.dims(7), c.i(8), c.acts(9));
  else if (m == "lstm")
    p.lstm(c.i(0), c.i(1), c.i(2), c.i(3), c.i(4), c.i(5), c.i(6), c.i(7), c.i(8), c.i(9));
  else if (m == "gru") p.gru(c.i(0), c.i(1), c.i(2), c.i(3), c.i(4), c.i(5), c.i(6), c.i(7), c.flag(8));
  else if (m == "pad") p.pad(c.i(0), c.i(1), c.dims(2), c.dims(3), c.f(4));
  else if (m == "pad_from_input") p.pad_from_input(c.i(0), c.i(1), c.dims(2), c.dims(3), pad_mode(c.name(4)));
  else if (m == "pool")
    p.pool(c.i(0), c.i(1), pool(c.name(2)), c.dims(3), c.dims(4), c.dims(5), c.dims(6), c.dims(7));
  else if (m == "mean_in_gate") p.mean_in_gate(c.i(0), c.i(1));
  else if (m == "resample") p.resample(c.i(0), c.i(1), c.flag(2));
  else if (m == "eltwise") p.eltwise(c.i(0), c.i(1), c.acts(2), c.flag(3));
  else if (m == "binary") p.binary(c.i(0), c.i(1), c.i(2), bin(c.name(3)), c.acts(4), c.flag(5));
  else if (m == "batch_norm")
    p.batch_norm(c.i(0), c.i(1), c.i(2), c.i(3), c.i(4), c.i(5), c.f(6), c.acts(7));
  else if (m == "linear") p.linear(c.i(0), c.i(1), c.i(2), c.i(3), c.acts(4), c.has(5) ? c.i(5) : -1);
  else if (m == "matmul")
    p.matmul(c.i(0), c.i(1), c.i(2), c.i(3), c.flag(4), c.flag(5), c.f(6), c.acts(7), c.has(8) ? c.i(8) : -1);
  else if (m == "concat") p.concat(c.i(0), c.ids(1), c.i(2));
  else if (m == "softmax") p.softmax(c.i(0), c.i(1), c.i(2), c.flag(3));
  else if (m == "reduce") p.reduce(c.i(0), c.i(1), reduce(c.name(2)));
  else if (m == "layer_norm") p.layer_norm(c.i(0), c.i(1), c.i(2), c.i(3), c.i(4), c.i(5), c.f(6));
  else if (m == "transpose") p.transpose(c.i(0), c.i(1), c.ids(2));
  else if (m == "slice") p.slice(c.i(0), c.i(1), c.dims(2), c.dims(3));
  else if (m == "reshape") p.reshape(c.i(0), c.i(1));
  else if (m == "attention") p.attention(c.i(0), c.i(1), c.i(2), c.i(3), c.i(4), c.f(5));
  else if (m == "quantize") p.quantize(c.i(0), c.i(1), c.f(2), int(c.i(3)));
  else if (m == "dequantize") p.dequantize(c.i(0), c.i(1), c.f(2), int(c.i(3)));
  else if (m == "qbinary")
    p.qbinary(c.i(0), c.i(1), c.i(2), bin(c.name(3)), c.f(4), int(c.i(5)), c.f(6), int(c.i(7)), c.f(8), int(c.i(9)),
              c.f(10), c.f(11));
  else if (m == "lookup") p.lookup(c.i(0), c.i(1), c.i(2));
  else if (m == "qconv")
    p.qconv(c.i(0), c.i(1), c.i(2), c.i(3), c.dims(4), c.dims(5), c.dims(6), c.dims(7), c.i(8), c.acts(9),
            c.i(10), c.f(11), int(c.i(12)), c.f(13), int(c.i(14)));
  else if (m == "qdeconv")
    p.qdeconv(c.i(0), c.i(1), c.i(2), c.i(3), c.dims(4), c.dims(5), c.dims(6), c.dims(7), c.i(8), c.acts(9),
              c.i(10), c.f(11), int(c.i(12)), c.f(13), int(c.i(14)));
  else if (m == "qmatmul")
    p.qmatmul(c.i(0), c.i(1), c.i(2), c.i(3), c.flag(4), c.acts(5), c.i(6), c.f(7), int(c.i(8)), c.f(9),
              int(c.i(10)));
  else if (m == "dynamic_qmatmul") p.dynamic_qmatmul(c.i(0), c.i(1), c.i(2), c.i(3), c.i(4));
  else if (m == "kernel") p.kernel(c.kernel(0), c.ids(1), c.ids(2), c.has(3) ? c.dims(3) : Dims{});
  else throw std::runtime_error("program: the runtime has no call '" + m + "'");
}

}  // namespace

extern "C" Partition* af_build(const int64_t* words, int64_t n_words, const char* const* strings,
                               const void* const* constants, Shared* shared, Arena* context,
                               const KernelFn* kernels, int any_size) {
  Partition* p = nullptr;
  try {
    p = new Partition(constants, shared, context, any_size != 0);
    for (int64_t at = 0; at < n_words;) {
      if (at + 3 > n_words || words[at] != Name) throw std::runtime_error("program: a call without its name");
      Call c{strings[words[at + 1]], {}, strings, kernels};
      const int64_t n = words[at + 2];
      at += 3;
      for (int64_t k = 0; k < n; ++k) {
        if (at >= n_words) throw std::runtime_error("program: " + c.method + " runs past the end");
        c.args.push_back(words + at);
        at += width(words + at);
      }
      if (at > n_words) throw std::runtime_error("program: " + c.method + " runs past the end");
      make(*p, c);
    }
    p->finalize();
    return p;
  } catch (const std::exception& e) {   // oneDNN's own errors do not say where
    const std::string what = e.what();
    set_error(what.rfind("node '", 0) == 0 || !p ? what : "node '" + p->current_node() + "': " + what);
  }
  delete p;
  return nullptr;
}

}  // namespace af
