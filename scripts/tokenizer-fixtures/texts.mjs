// Texts the tokenizer code was never developed against, for the Hugging Face fixtures:
// several languages and scripts, code, emoji, whitespace runs, case-folding traps, digits,
// and random strings drawn from every kind of character the pre-tokenizer regexes tell apart.
const written = [
  'The quick brown fox jumps over the lazy dog; Pack my box with five dozen liquor jugs.',
  "Don't panic — it's only a test. Y'ALL'D've been THERE'S, o'clock, rock'n'roll.",
  "Long s: 'ſ 'ſt I'ſ IT'ſ Kelvin 'K 'k and dotless 'ı 'İ, ligature 'ﬅ",
  'Zürich, Kraków, São Paulo, Reykjavík, Ærøskøbing — straße STRASSE Maße',
  'Φιλοσοφία και επιστήμη· Это проверка токенизатора. Ґрунт і їжак. Ողջույն, ქართული ენა.',
  '北京市朝阳区建国路88号，电话：010-12345678。東京都渋谷区のカフェで、ひらがなとカタカナを混ぜる。',
  '서울특별시 강남구 테헤란로 427, 대한민국. ภาษาไทยไม่มีช่องว่างระหว่างคำ. ພາສາລາວ. ខ្មែរ.',
  'العربية: مرحبًا بكم في ٢٠٢٤ — فارسی: ۱۲۳۴ سلام. עברית: שָׁלוֹם עֲלֵיכֶם.',
  'हिन्दी में ४२ शब्द, বাংলা ভাষা ১২৩, தமிழ் ௧௨௩, ગુજરાતી ૧૨, ಕನ್ನಡ ೧೨, മലയാളം ൧൨',
  'Numbers 0 7 42 512 2048 65536 1234567 3.141592653589793 6.022e23 -17 +8 1_000_000 ½ ⅔ Ⅻ ⁴²',
  'function add(a, b) {\n  return a + b;\n}\nconsole.log(add(2, 40)); // => 42\n',
  '#include <stdio.h>\nint main(void) {\n\tprintf("%d\\n", 0x1F);\n\treturn 0;\n}\n',
  'SELECT id, name FROM users WHERE age >= 21 AND email LIKE \'%@example.org\' ORDER BY name;',
  '<div class="note">Hello &amp; <b>bye</b></div>\n<!-- comment -->\n{"key": [1, 2.5, null, true]}',
  'fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![1u8; 16]; Ok(()) }',
  '    four spaces\n\ttab\n\n\n\nmany newlines\r\n\r\nCRLF   trailing   \n     \n  ',
  '          ten spaces before, then words      and gaps        ',
  '\t\t\t\v\f mixed controls \u0085 NEL \u2028 LS \u2029 PS \u200b ZWSP \u00a0 NBSP \u3000 end',
  'Emoji 🙂🙃😉 families 👩‍👩‍👧 👨🏿‍🦱 flags 🇯🇵🇧🇷🏳️‍🌈 keycaps 1️⃣#️⃣ hearts ❤️🧡💛 🫠🪿',
  'Math: ∀x∈ℝ, ∃y: x²+y²=1 ⇒ |x|≤1; ∫₀^∞ e^{-x} dx = 1; ∑ᵢ aᵢ ≠ ∏ⱼ bⱼ',
  'Mixed scripts: HelloМир你好🌍 camelCaseToken snake_case_token kebab-case-token ALLCAPS MiXeD',
  'URLs: https://www.example.com/path/to/page?query=1&lang=en#section and ftp://files.example.net/a/b/c//',
  "Punctuation runs: ...!!!??? ,,,;;; --- ___ ''' \"“quotes”\" «guillemets» ‹single› 【brackets】",
  'Combining: e\u0301 a\u0308 o\u0302\u0323 n\u0303 and precomposed é ä ộ ñ; Ǆ ǅ ǆ; ﬁ ﬂ ﬃ',
  'A' + 'a'.repeat(60) + ' ' + '9'.repeat(25) + ' ' + '!'.repeat(30),
  'über uber ÜBER Über über-all WORD WORDS aWORD WORD_ [L]  after   [R]   and <tool> plus  plus',
  'x', '  ', '\n\n', '7', "'s", 'ſ',
];

// Random strings over pools of characters of each class the patterns distinguish (cased and
// uncased letters, marks, digits of several scripts, punctuation, symbols, spaces of several
// kinds, newlines, apostrophes), from a fixed seed.
const pools = [
  'abcxyzABCXYZ', 'éÀßÆøĳſǅǈǋΣσςДжЖ', '中文字カタひら한글', '\u0301\u0308\u0327\u093c\u0bcd',
  '0123456789', '٠١٢٣۴۵६७௮๙', '²³¹½⅓Ⅳ', '.,;:!?-_()[]{}"\'/\\@#%&*', '$+<=>^`|~©®°±×÷€™',
  "'''", '    \t', '\n\n\r', '\u00a0\u2003\u3000\u0085', '😀🚀👍🏽', 'sStTdDmMlLrReEvV',
];
let seed = 20261201;
const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const random = [];
for (let i = 0; i < 14; ++i) {
  let s = '';
  for (let k = 10 + Math.floor(rnd() * 50); k > 0; --k) {
    const pool = [...pools[Math.floor(rnd() * pools.length)]];
    s += pool[Math.floor(rnd() * pool.length)];
  }
  random.push(s);
}

export const unseenTexts = [...written, ...random];
