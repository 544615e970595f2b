// The built-in training corpus of TrainByteLevelBpe: original English prose,
// C++ and Python code, and Chinese text, so that a synthetic vocabulary has
// merges for words, identifiers, punctuation runs and CJK byte sequences.
#include <string>

#include "synth/bpe_trainer.h"

namespace moetier {
namespace {

// English prose.
constexpr char kProse[] = R"corpus(The Harbour at Low Tide

Every morning the harbour empties a little before it fills again. The boats lean on their keels in the mud, the gulls walk where the water was, and the men who mend nets sit on upturned crates and argue about the weather. Nobody in the town owns a barometer that everyone trusts, so the argument never ends. One of them says the wind will turn by noon; another says it won't turn until Thursday; the third says nothing at all and keeps working, which is how you know he is the one who is usually right.

I came here in the spring of 2019 with a suitcase, a borrowed bicycle and the idea that I would stay for three weeks. It's now the sixth year, and I still haven't returned the bicycle. The woman who lent it to me says she doesn't want it back. "You've ridden it further than I ever did," she told me. "It belongs to the road now, not to me."

The town has one bakery, two churches, four pubs and a library that opens on Tuesdays, Thursdays and Saturdays from ten until four. The librarian, Mr. Ellison, has worked there for thirty-one years. He keeps a ledger in which he writes the name of every book that is borrowed, the date it goes out and the date it comes back. When I asked him why he didn't use the computer that the county had installed, he said the computer had forgotten things twice and the ledger had never forgotten anything.

On Saturdays there is a market in the square. A farmer from the valley sells potatoes, onions, carrots and, in late summer, tomatoes so ripe that they split if you look at them too long. A retired teacher sells jars of honey with handwritten labels: "Heather, August", "Clover, June", "Mixed, don't ask". Children run between the stalls with paper bags of sweets, and the dogs of the town follow them in the hope that something will fall.

In winter the market shrinks to three tables and a brazier. The farmer brings leeks and cabbages; the honey seller brings candles instead of honey. People stand close to the fire and talk about the storms. The worst storm anyone remembers came in 1987, when the sea broke over the wall and filled the ground floor of the Anchor with water up to the bar. The landlord's grandson still points at a brass plate on the wall that marks the height of the flood.

A Note on Tea

There are two schools of thought about tea in this part of the world, and they do not speak to each other. The first school holds that the milk goes in first, because that is how their grandmothers did it and because the cup was once too delicate to take boiling water without cracking. The second school holds that the tea goes in first, so that you can judge the strength by its colour before adding milk. I have belonged to both schools at different times in my life, and I can report that the tea tastes much the same either way, provided that the water has actually boiled.

What matters more is time. Black tea wants three to five minutes; green tea wants less, and water that has cooled for a minute or two after boiling. If you leave green tea too long, it turns bitter, and there's no saving it. If you take black tea out too early, it tastes of nothing but hot water and good intentions. The difference between a good cup and a bad one is usually a matter of patience, not of price.

How a Stone Bridge Stands

A stone arch bridge is a simple machine for turning weight into pressure. Each stone in the arch pushes against its neighbours, and the push travels along the curve of the arch down into the ground on either side. As long as the line of that push stays inside the stones, the arch stands; when it wanders outside, the arch begins to open like a hinge, and then it falls.

The builders of old bridges did not calculate lines of thrust with equations. They built a wooden frame, called centring, in the shape of the arch, and laid the stones on top of it. Only when the last stone, the keystone, was in place did they knock the centring away. If the bridge stood, they had been right. If it did not, they started again, usually with fewer workers than before.

Many of these bridges are still standing after four or five hundred years. They carry lorries that weigh forty tonnes, far more than any cart their builders imagined. The reason is that an arch gets stronger, not weaker, as you load it from above, up to a point: the extra weight presses the stones more tightly together. What destroys old bridges is not weight but water. Floods scour away the foundations, and frost splits stones from the inside.

The Lighthouse Keeper

For eleven years Margaret Hale kept the light on the point. She was not the first woman to do the job, but she was the last person of any kind to do it, because in 1998 the light was automated and the keepers were sent home. She stayed on in the cottage anyway. The lighthouse board said it would sell the cottage, and then said it wouldn't, and then forgot about her.

Her days had a shape to them. At dawn she walked to the top of the tower and looked at the sea. She wrote down the direction of the wind, the height of the waves, the colour of the sky and anything else she noticed: a ship far out, a seal on the rocks, a flock of terns going south. After the light was automated there was no reason to write anything down, but she kept writing. "Somebody should know what the sea did today," she said. "It might as well be me."

In the evening she lit a lamp in her kitchen window. It was not a navigation light, and no ship would ever steer by it, but the fishermen coming home late would look for it as they rounded the point. If the window was dark, they would telephone the shop, and the shop would send someone up the hill to knock on her door. It happened only once, in February of 2004, when she had fallen on the ice and broken her wrist. The boy who found her stayed with her until the doctor came, and afterwards he visited every week until he left for university.

When she died, in the autumn of 2016, the town found forty-two notebooks in the cottage, one for every year she had lived there and several for the years before. The library keeps them now. Mr. Ellison has written each one into his ledger, with the note: "Not for loan. Read here."

Questions and Answers

"What time does the ferry leave?"
"Half past seven, if the sea's calm. If it isn't, it doesn't."
"And when will we know?"
"You'll know when you see it. Or when you don't."
"That's not very helpful."
"It's not meant to be helpful. It's meant to be true."

"Did you lock the door?"
"I'm sure I did."
"You said that last time."
"Last time I was wrong. This time I'm right. I've checked twice."
"Then why are you going back to look?"
"Because I'd rather be sure than be right."

Reading Instructions

Read the whole recipe before you begin. Measure everything first: 250 grams of flour, 125 grams of butter, 2 eggs, 100 millilitres of milk, a pinch of salt, 1 teaspoon of baking powder. Heat the oven to 180 degrees. Rub the butter into the flour until it looks like breadcrumbs. Beat the eggs with the milk and stir them in. Do not overmix; a few lumps are fine. Spoon the mixture into the tin and bake for 25 to 30 minutes, or until a skewer comes out clean. Let it cool for 10 minutes before you turn it out, or it will break.

If it breaks anyway, call it a crumble and serve it with cream. Nobody has ever complained about a crumble.

On Learning to Program

The first program most people write prints a greeting to the screen. The second program usually asks for the user's name and then prints a greeting with the name in it. By the third program, the learner has discovered that computers do exactly what they are told, which is not always what was meant. This is the most important lesson in programming, and it is learned again and again, at every level of experience.

Good programmers are not people who never make mistakes. They are people who have learned to make their mistakes visible quickly. They write small pieces of code and test each one before they build on it. They read error messages carefully instead of guessing. They keep notes. When something works and they don't know why, they treat that as a problem, not as a success, because code that works by accident will stop working by accident.

A useful habit is to explain your code, out loud, to someone who does not know anything about it. If no person is available, a rubber duck on the desk will do. Halfway through the explanation you will often hear yourself say something that cannot be true, and that is where the bug is.

Another useful habit is to keep the distance short between what you write and what you can check. A function of ten lines that you can test in a second is worth more than a function of two hundred lines that you can only test by running the whole program for an hour. When a program is slow to test, people test it less, and then they find out what is wrong with it from their users.

Names matter more than most beginners expect. A variable called x tells the reader nothing; a variable called temperature_celsius tells them the quantity and the unit. A function called process does something; a function called remove_duplicate_rows does one thing, and you can tell whether it does it correctly. When you cannot find a good name for a function, it is often a sign that the function does too many things.

The Weather Report

Monday: cloudy, with rain spreading from the west during the afternoon. Winds moderate, becoming strong near the coast. Highest temperature 11 degrees.
Tuesday: showers, heavy at times, with a risk of thunder. Brighter later. Highest temperature 9 degrees.
Wednesday: dry and bright after a cold start; frost in sheltered places. Highest temperature 8 degrees.
Thursday: rain arriving by the evening, turning to sleet over high ground. Highest temperature 7 degrees.
Friday: unsettled, with sunny spells and blustery showers. Highest temperature 10 degrees.

Letters

Dear Anna,
Thank you for the photographs. The one of the garden in June is my favourite; I didn't know the roses had grown so tall. We've had a wet month here, and the river came up over the path twice, but the house is dry and the cat is furious about the rain, as always. I've started the new job. The people are kind, the work is harder than I expected, and the coffee is terrible. I'll write again when I know more.
With love,
Tom

Dear Tom,
I'm glad the job is going well, apart from the coffee. Buy a small jar of your own and hide it in your desk; that's what I did for twenty years. The roses are over now, but the apples are coming, and there will be far too many of them, as usual. Come in October and take some home. Bring the cat if she promises to behave.
Love,
Anna

The Long Walk

We set out at six, before the sun was properly up, with sandwiches, two flasks of coffee and a map that was older than either of us. The path climbed steadily through the woods for the first hour. Then the trees thinned, the wind found us, and we could see the whole valley below: the river, the railway, the grey roofs of the village, a tractor crawling across a field like a beetle.

By ten we had reached the ridge. The map said there was a cairn at the top; there was, but it was smaller than we expected, and someone had built a second, larger cairn a few metres away, so we argued about which one was the real summit. We touched both, to be safe. Then we sat down out of the wind and ate the sandwiches, which were squashed, and drank the coffee, which was perfect.

The way down took longer than the way up, as it always does. Our knees complained, the path was wet, and we took a wrong turning that added an hour to the walk. We got back to the car at four, tired and muddy and very pleased with ourselves. On the drive home we agreed that we would do it again next year, and that next year we would bring a newer map.

Numbers in Everyday Life

A household in the town uses about 140 litres of water a day. A bath takes 80 litres, a shower of five minutes takes about 40, and the washing machine takes 50 for each load. The kettle, boiled eight times a day, uses less than 3 litres, though it feels like more. The town's reservoir holds 2.5 million cubic metres when it is full, enough for about two years without rain, which has never happened and, the older residents say, never will.

The bus to the city runs every 45 minutes on weekdays and every 90 minutes on Sundays. The journey takes 1 hour and 10 minutes if the roads are clear, and 1 hour and 40 minutes if they are not. A return ticket costs 8.60, or 6.45 with a railcard, though nobody has ever explained why a railcard gives a discount on a bus.

The Clockmaker's Shop

At the bottom of Mill Street there is a shop with a green door and a window full of clocks. None of them shows the same time. The clockmaker, a tall man with very small spectacles, says this is deliberate: a customer who sees twenty clocks that agree assumes they are all correct, but a customer who sees twenty clocks that disagree starts to think about what time actually is. He is not sure that this is good for business, but he says it is good for the customers.

He repairs anything with a spring or a pendulum: wristwatches, carriage clocks, kitchen timers, the great clock in the church tower. He does not repair anything with a battery. "A battery clock doesn't need me," he says. "It either works or it goes in the bin. A spring clock needs someone to understand it."

His workbench is covered with tiny screws, each in its own tin, and each tin has a label written in pencil. When he opens a watch, he lays the parts out on a white cloth in the order he removed them, so that he can put them back in reverse. It takes him an hour to take a watch apart and three hours to put it together again, because putting it back together is when he finds out what was wrong.

Once a year, on the last Sunday of October, the clocks go back an hour. On that morning the clockmaker walks around the shop and changes every clock by hand, all hundred and twelve of them. It takes him most of the day. He could leave them, since they are all wrong anyway, but he says that would be cheating.

Gardening Through the Year

In January, the garden looks dead, but it is only sleeping. This is the month for planning: order seeds, clean tools, sharpen the blades of the shears and the spade, and mend the fence before the wind finds the weak places. If the ground is not frozen, you can plant bare-root trees and roses.

In March, the first seeds go in: broad beans outside, tomatoes and peppers on the windowsill. The days are longer but the nights are still cold, so keep a sheet of fleece ready for the beds when frost is forecast. Slugs wake up at the same time as the lettuces, and they are hungrier.

In May, everything happens at once. The weeds grow faster than you can pull them, the potatoes push up through the soil, and the apple trees flower for about ten days, during which a single late frost can destroy the whole year's crop. Water in the evening, not at midday, so that the water soaks in rather than evaporating.

In August, you harvest more than you can eat. Give courgettes to your neighbours until they stop answering the door. Make jam from the plums, chutney from the green tomatoes and soup from whatever is left. Save seeds from the best plants, dry them on paper and store them in envelopes labelled with the name and the year.

In November, the leaves come down. Rake them into a wire cage and leave them for two years; they will turn into the best soil you have ever seen. Cover the empty beds with compost or cardboard, and let the worms do the digging for you over the winter.

A Short History of Maps

The oldest maps were not drawn to help people find their way. They were drawn to show who owned what: fields, rivers, the boundaries of kingdoms. A map was a claim, and a claim needs a witness, so maps were kept in temples and palaces, not carried by travellers.

The maps that sailors used were different. They showed coastlines, harbours, rocks and the direction of the wind at different times of year. They were copied by hand, and each copy added something: a new harbour, a corrected headland, a warning about a reef that had sunk someone's ship. A good chart was a record of many voyages, and of many mistakes.

Printing changed maps as it changed books. A printed map could be made in hundreds of identical copies, so an error spread as fast as a correction. Some errors lasted for centuries. California was drawn as an island on maps for more than a hundred years after sailors had shown that it was not, because the engravers copied from earlier maps rather than from the reports of people who had been there.

Today most maps are made from satellite images and updated every few weeks. They are more accurate than any map in history, and they are almost never printed. The map on a phone shows where you are, not where the land is, and it forgets your journey as soon as you arrive.

The Night Train

The night train leaves the capital at a quarter to eleven and arrives on the coast at half past six in the morning, if nothing goes wrong. Something usually goes wrong. A signal fails outside a junction whose name nobody can pronounce; a cow wanders onto the line; a driver is delayed by another train that was itself delayed. The passengers sleep through most of it, and the ones who don't sleep stand in the corridor and watch the dark fields go by.

The sleeping cars are narrow. Each compartment has two bunks, one above the other, a tiny basin that folds down from the wall, and a ladder that is never quite where your foot expects it to be. The attendant brings a bottle of water, a paper cup and a card on which you write what you want for breakfast: tea or coffee, toast or a roll, jam or honey. In the morning you get coffee and a roll whatever you wrote, and nobody minds.

What I like about the night train is that it turns a journey into a kind of pause. You can't do anything useful on it. The signal on your phone comes and goes, the light is too dim for reading, and the rocking of the carriage makes writing impossible. So you lie on the bunk and listen to the wheels on the rails, and you think about whatever comes into your head, and at some point you fall asleep without noticing. When you wake up, you are somewhere else.

A Conversation About Repairs

"The tap's dripping again."
"Which one?"
"The one in the bathroom. It's been dripping since Sunday."
"I fixed that one last month."
"You fixed the one in the kitchen."
"Did I? I'm sure it was the bathroom."
"It was the kitchen. You said the washer was worn out, and you went to the hardware shop, and they didn't have the right size, so you bought three sizes and used the middle one."
"Then I've got two washers left."
"You've got one. You used the other on the garden hose."
"Then I've got one, and one is all I need."
"If it's the right size."
"We'll find out."

Notes From a Small Observatory

On clear nights the observatory on the hill opens its dome to visitors. It is not a large telescope, only forty centimetres across, but on a good night it shows the rings of Saturn, the moons of Jupiter and the craters along the edge of the Moon, where the shadows are longest. The volunteers who run it are patient with children and more patient with adults, who ask harder questions and listen less to the answers.

The most common question is how far away things are. The Moon is about 384,000 kilometres away, and its light takes a little more than a second to reach us. The Sun's light takes about eight minutes. The light from the nearest star beyond the Sun left it more than four years ago. The faint smudge of the Andromeda galaxy, which you can just see without a telescope on a very dark night, is light that set out two and a half million years ago, before there were any people to look at it.

The second most common question is whether there is life out there. The volunteers have a standard answer: "We don't know yet, but we're looking." It is an honest answer, and it has the advantage of being true for a very long time.

Weather on the Coast

People who live on the coast learn to read the sky the way other people read a newspaper. A ring around the Moon means rain within a day or two. Mackerel sky, the small rippled clouds high up, means the weather is about to change. When the gulls come inland and stand in the fields facing the wind, a storm is coming, and you should bring the washing in and tie down anything that might blow away.

None of these signs is reliable on its own, and the forecast on the radio is usually better than any of them. But the forecast covers a whole region, and the sky covers only the place where you are standing, which is the place you care about. So people listen to the radio, and then they go outside and look up, and then they decide for themselves.

The Village Orchestra

The village orchestra has twenty-three members, if you count the conductor, and nineteen if you count only the people who come to rehearsals regularly. They meet on Wednesday evenings in the school hall, where the chairs are too small and the piano is a quarter of a tone flat. Nobody has ever tuned it, because the man who used to tune it moved away, and everyone is afraid that a new tuner would find something terrible inside.

The orchestra plays two concerts a year, one at Christmas and one in early summer. The programme is chosen by the conductor, a retired music teacher who believes that amateurs should always attempt music that is slightly too hard for them. "If it's easy, you're not learning," she says. The players agree with her in principle and complain about her in practice, usually in the pub afterwards.

The concerts are always full. Half of the audience is related to someone in the orchestra, and the other half comes because there is cake in the interval. The applause is generous, the mistakes are forgiven, and at the end the conductor turns to the audience, bows, and says the same thing every time: "Thank you. We'll get it right next year."

A Guide to the Footpaths

Most of the footpaths around the town are old. Some of them were made by farmers driving sheep to market, some by miners walking to the quarry, and some by people going to church on Sunday from the farms in the hills. They follow the easiest way across the land, which is not always the shortest, and they are marked by stiles, gates and the occasional wooden sign that has been turned the wrong way by someone with a sense of humour.

The coastal path is the most popular. It runs for eleven miles from the harbour to the next bay, along the top of the cliffs, with views of the sea on one side and fields on the other. In spring the cliffs are covered with thrift and sea campion, and in summer you can watch the seabirds feeding their young on the ledges below. Keep dogs on a lead and children away from the edge; the cliffs crumble, and the warning signs are there for a reason.

The inland paths are quieter. The best of them climbs through the beech wood behind the church, crosses the old railway line, and comes out on the common, where there are wild ponies and, in late summer, more blackberries than anyone could eat. Allow three hours for the round trip, and take water, because there is no shop until you get back to town.
)corpus";

// C++ and Python code.
constexpr char kCode[] = R"corpus(// ring_buffer.h: a fixed-capacity queue that never allocates after construction.
#pragma once

#include <cassert>
#include <cstddef>
#include <optional>
#include <vector>

template <typename T>
class RingBuffer {
 public:
  explicit RingBuffer(size_t capacity) : items_(capacity), head_(0), size_(0) {
    assert(capacity > 0);
  }

  bool empty() const { return size_ == 0; }
  bool full() const { return size_ == items_.size(); }
  size_t size() const { return size_; }
  size_t capacity() const { return items_.size(); }

  // Returns false when the buffer is full; the caller decides what to drop.
  bool Push(const T& value) {
    if (full()) return false;
    items_[(head_ + size_) % items_.size()] = value;
    ++size_;
    return true;
  }

  std::optional<T> Pop() {
    if (empty()) return std::nullopt;
    T value = items_[head_];
    head_ = (head_ + 1) % items_.size();
    --size_;
    return value;
  }

 private:
  std::vector<T> items_;
  size_t head_;
  size_t size_;
};

// split.cc: split a line at a separator, keeping empty fields.
#include <string>
#include <string_view>
#include <vector>

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    if (end == std::string_view::npos) {
      fields.push_back(text.substr(start));
      return fields;
    }
    fields.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

// matmul.cc: y = W * x for a row-major matrix W of shape rows x cols.
void MatVec(const float* w, const float* x, float* y, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    float sum = 0.0f;
    const float* row = w + static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) {
      sum += row[c] * x[c];
    }
    y[r] = sum;
  }
}

float Dot(const std::vector<float>& a, const std::vector<float>& b) {
  assert(a.size() == b.size());
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(sum);
}

// word_count.cc: count words read from standard input and print the top ten.
#include <algorithm>
#include <iostream>
#include <map>
#include <unordered_map>
#include <utility>

int main() {
  std::unordered_map<std::string, int> counts;
  std::string word;
  while (std::cin >> word) {
    std::transform(word.begin(), word.end(), word.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    ++counts[word];
  }
  std::vector<std::pair<std::string, int>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return a.first < b.first;
  });
  const size_t shown = std::min<size_t>(10, sorted.size());
  for (size_t i = 0; i < shown; ++i) {
    std::cout << sorted[i].first << '\t' << sorted[i].second << '\n';
  }
  return 0;
}

// status.h: a result that is either a value or an error message.
template <typename T>
struct Result {
  std::optional<T> value;
  std::string error;

  static Result Ok(T v) { return Result{std::move(v), {}}; }
  static Result Error(std::string message) { return Result{std::nullopt, std::move(message)}; }
  bool ok() const { return value.has_value(); }
};

Result<int> ParsePort(std::string_view text) {
  if (text.empty()) return Result<int>::Error("port is empty");
  int port = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return Result<int>::Error("port has a non-digit character");
    port = port * 10 + (c - '0');
    if (port > 65535) return Result<int>::Error("port is larger than 65535");
  }
  if (port == 0) return Result<int>::Error("port 0 is reserved");
  return Result<int>::Ok(port);
}

// lru_cache.h: least-recently-used cache with O(1) lookup and eviction.
#include <list>

template <typename Key, typename Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  const Value* Get(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  void Put(const Key& key, Value value) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      it->second->second = std::move(value);
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    if (order_.size() == capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
  }

 private:
  size_t capacity_;
  std::list<std::pair<Key, Value>> order_;
  std::unordered_map<Key, typename std::list<std::pair<Key, Value>>::iterator> index_;
};

// thread_pool.cc: a pool of worker threads that run queued tasks in order.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>

class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 0; i < threads; ++i) {
      workers_.emplace_back([this] { Loop(); });
    }
  }

  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void Submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push(std::move(task));
    }
    ready_.notify_one();
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (stopping_ && tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop();
      }
      task();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::queue<std::function<void()>> tasks_;
  std::vector<std::thread> workers_;
  bool stopping_ = false;
};

# csv_summary.py: print the mean, minimum and maximum of every numeric column.
import argparse
import csv
import math
import sys
from collections import defaultdict


def parse_args(argv):
    parser = argparse.ArgumentParser(description="Summarise the numeric columns of a CSV file.")
    parser.add_argument("path", help="the CSV file to read")
    parser.add_argument("--delimiter", default=",", help="field separator (default: comma)")
    parser.add_argument("--skip-empty", action="store_true", help="ignore empty cells")
    return parser.parse_args(argv)


def summarise(rows, skip_empty):
    columns = defaultdict(list)
    for row in rows:
        for name, cell in row.items():
            if cell == "" and skip_empty:
                continue
            try:
                columns[name].append(float(cell))
            except ValueError:
                pass
    summary = {}
    for name, values in columns.items():
        if not values:
            continue
        mean = sum(values) / len(values)
        variance = sum((v - mean) ** 2 for v in values) / len(values)
        summary[name] = {
            "count": len(values),
            "mean": mean,
            "std": math.sqrt(variance),
            "min": min(values),
            "max": max(values),
        }
    return summary


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    with open(args.path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f, delimiter=args.delimiter)
        summary = summarise(reader, args.skip_empty)
    for name, stats in sorted(summary.items()):
        print(f"{name:20s} n={stats['count']:6d} mean={stats['mean']:10.3f} "
              f"std={stats['std']:10.3f} min={stats['min']:10.3f} max={stats['max']:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


# inventory.py: a small class with validation and a readable repr.
class Item:
    def __init__(self, name, quantity, price):
        if quantity < 0:
            raise ValueError(f"quantity of {name!r} must not be negative")
        if price < 0:
            raise ValueError(f"price of {name!r} must not be negative")
        self.name = name
        self.quantity = quantity
        self.price = price

    def total(self):
        return self.quantity * self.price

    def __repr__(self):
        return f"Item(name={self.name!r}, quantity={self.quantity}, price={self.price:.2f})"


class Inventory:
    def __init__(self):
        self._items = {}

    def add(self, item):
        if item.name in self._items:
            self._items[item.name].quantity += item.quantity
        else:
            self._items[item.name] = item

    def remove(self, name, quantity=1):
        item = self._items.get(name)
        if item is None:
            raise KeyError(name)
        if item.quantity < quantity:
            raise ValueError(f"only {item.quantity} of {name!r} left")
        item.quantity -= quantity
        if item.quantity == 0:
            del self._items[name]

    def value(self):
        return sum(item.total() for item in self._items.values())

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(sorted(self._items.values(), key=lambda item: item.name))


def fibonacci(n):
    """Return the first n Fibonacci numbers as a list."""
    numbers = []
    a, b = 0, 1
    for _ in range(n):
        numbers.append(a)
        a, b = b, a + b
    return numbers


def is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    i = 3
    while i * i <= n:
        if n % i == 0:
            return False
        i += 2
    return True


def primes_below(limit):
    return [n for n in range(limit) if is_prime(n)]


def binary_search(values, target):
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < len(values) and values[lo] == target else -1


def read_config(path):
    config = {}
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise ValueError(f"{path}:{line_number}: expected key = value")
            key, value = (part.strip() for part in line.split("=", 1))
            config[key] = value
    return config


if __name__ == "__main__":
    print(fibonacci(10))
    print(primes_below(50))
    print(binary_search([1, 3, 5, 7, 9, 11], 7))
    shop = Inventory()
    shop.add(Item("apple", 12, 0.35))
    shop.add(Item("bread", 2, 1.80))
    shop.add(Item("apple", 6, 0.35))
    shop.remove("bread")
    for item in shop:
        print(item)
    print(f"total value: {shop.value():.2f}")

// json_escape.cc: escape a string for a JSON document.
std::string JsonEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out += buffer;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

// histogram.cc: bucket values into equal-width bins and draw them as bars.
struct Histogram {
  double low = 0.0;
  double high = 1.0;
  std::vector<int64_t> bins;

  Histogram(double lo, double hi, int count) : low(lo), high(hi), bins(count, 0) {}

  void Add(double value) {
    if (value < low || value >= high) return;
    const auto index = static_cast<size_t>((value - low) / (high - low) * bins.size());
    ++bins[std::min(index, bins.size() - 1)];
  }

  void Print(std::ostream& os, int width) const {
    const int64_t peak = *std::max_element(bins.begin(), bins.end());
    for (size_t i = 0; i < bins.size(); ++i) {
      const double from = low + (high - low) * i / bins.size();
      const int bar = peak == 0 ? 0 : static_cast<int>(bins[i] * width / peak);
      os << std::setw(8) << std::fixed << std::setprecision(2) << from << " | "
         << std::string(bar, '#') << ' ' << bins[i] << '\n';
    }
  }
};

// tree.cc: an unbalanced binary search tree with in-order traversal.
struct Node {
  int key;
  std::unique_ptr<Node> left;
  std::unique_ptr<Node> right;
};

void Insert(std::unique_ptr<Node>& root, int key) {
  if (!root) {
    root = std::make_unique<Node>(Node{key, nullptr, nullptr});
  } else if (key < root->key) {
    Insert(root->left, key);
  } else if (key > root->key) {
    Insert(root->right, key);
  }
}

void InOrder(const Node* node, std::vector<int>* out) {
  if (node == nullptr) return;
  InOrder(node->left.get(), out);
  out->push_back(node->key);
  InOrder(node->right.get(), out);
}

int Height(const Node* node) {
  if (node == nullptr) return 0;
  return 1 + std::max(Height(node->left.get()), Height(node->right.get()));
}

# matrix.py: small dense matrix helpers without any third-party library.
def zeros(rows, cols):
    return [[0.0] * cols for _ in range(rows)]


def identity(n):
    result = zeros(n, n)
    for i in range(n):
        result[i][i] = 1.0
    return result


def matmul(a, b):
    rows, inner, cols = len(a), len(b), len(b[0])
    if len(a[0]) != inner:
        raise ValueError(f"shapes {rows}x{len(a[0])} and {inner}x{cols} do not match")
    result = zeros(rows, cols)
    for i in range(rows):
        for k in range(inner):
            aik = a[i][k]
            if aik == 0.0:
                continue
            row = b[k]
            out = result[i]
            for j in range(cols):
                out[j] += aik * row[j]
    return result


def transpose(m):
    return [list(column) for column in zip(*m)]


def softmax(values):
    peak = max(values)
    exps = [math.exp(v - peak) for v in values]
    total = sum(exps)
    return [e / total for e in exps]


def top_k(values, k):
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    return order[:k]


class Timer:
    """Context manager that measures the wall time of a block."""

    def __init__(self, label):
        self.label = label
        self.start = None
        self.seconds = None

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, traceback):
        self.seconds = time.perf_counter() - self.start
        print(f"{self.label}: {self.seconds * 1000:.1f} ms")
        return False


// bit_set.h: a fixed-size set of small integers stored as 64-bit words.
class BitSet {
 public:
  explicit BitSet(size_t size) : words_((size + 63) / 64, 0), size_(size) {}

  void Set(size_t i) { words_[i / 64] |= uint64_t{1} << (i % 64); }
  void Clear(size_t i) { words_[i / 64] &= ~(uint64_t{1} << (i % 64)); }
  bool Test(size_t i) const { return (words_[i / 64] >> (i % 64)) & 1; }

  size_t Count() const {
    size_t count = 0;
    for (uint64_t word : words_) count += static_cast<size_t>(__builtin_popcountll(word));
    return count;
  }

  size_t size() const { return size_; }

 private:
  std::vector<uint64_t> words_;
  size_t size_;
};

// percentile.cc: the p-th percentile of a sample, with linear interpolation.
double Percentile(std::vector<double> values, double p) {
  assert(!values.empty());
  assert(p >= 0.0 && p <= 100.0);
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = rank - static_cast<double>(below);
  return values[below] + (values[above] - values[below]) * fraction;
}

// file_reader.cc: read a whole file, reporting the reason when it fails.
Result<std::string> ReadWholeFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return Result<std::string>::Error(path + ": " + std::strerror(errno));
  }
  std::string contents;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    contents.append(buffer, n);
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return Result<std::string>::Error(path + ": read error");
  return Result<std::string>::Ok(std::move(contents));
}
)corpus";

// Chinese text.
constexpr char kChinese[] = R"corpus(四季

春天来的时候，河边的柳树先绿了。早上的风还有一点凉，可是阳光已经很温暖。老人们在公园里打太极拳，孩子们在草地上放风筝。小卖部门口摆出了新鲜的草莓和樱桃，价格不便宜，但是买的人很多。下过一场小雨以后，空气里都是泥土和青草的味道。

夏天的白天很长，晚上八点天还没有完全黑。街上到处是卖西瓜的小车，切开的西瓜红得发亮。人们喜欢在树荫下乘凉，一边喝茶一边聊天。到了七月，雨水多起来，常常是上午晴天，下午突然打雷下大雨，半个小时以后又出太阳了。

秋天是这座城市最好的季节。天空又高又蓝，不冷也不热。山上的枫叶慢慢变红，周末的时候，很多人坐车去郊外爬山、拍照。市场上有新米、板栗、柿子和螃蟹。我的奶奶说，秋天吃螃蟹一定要配一杯热的黄酒，不然对胃不好。

冬天不常下雪，但是一旦下雪，整个城市都安静了。学生们在操场上堆雪人，打雪仗，老师也不生气。家里开着暖气，窗户上结了一层薄薄的水汽。晚饭吃一锅热腾腾的火锅，是冬天里最幸福的事情。

我的城市

我住的城市不算大，大概有三百万人。老城区在河的北边，街道很窄，两边是两层的旧房子，楼下开店，楼上住人。新城区在河的南边，有高楼、商场、地铁和一个很大的体育馆。每天早上七点到九点，过河的两座桥都很堵，所以很多人选择骑自行车或者坐地铁上班。

城市的中心有一个广场，广场旁边是图书馆和博物馆。图书馆每天早上九点开门，晚上九点关门，星期一休息。借书不要钱，只要办一张读者证。博物馆里有很多古代的陶器、铜器和字画，还有一间专门介绍这座城市历史的展厅。听说这里两千年前就已经有人居住了。

我最喜欢的地方是河边的一条小路。路的一边是河，另一边是一排老槐树。傍晚的时候，很多人在这里散步、遛狗、跑步。有一位老先生每天都在同一张长椅上拉二胡，拉得不算好，可是大家都习惯了，要是哪天听不到，反而觉得少了点什么。

做饭

我是上大学以后才开始学做饭的。第一次做西红柿炒鸡蛋，鸡蛋炒糊了，西红柿还是生的，室友吃了一口就笑了。后来我给妈妈打电话，她告诉我：先把鸡蛋炒到刚刚凝固就盛出来，再炒西红柿，炒出汤汁以后放一点糖和盐，最后把鸡蛋倒回去，翻几下就可以出锅了。按照她说的方法做，果然好吃多了。

做饭其实和写程序有点像。你要先准备好所有的材料，就像先定义好所有的变量；你要注意顺序，先放什么后放什么，顺序错了结果就不对；你还要不断地尝一尝，就像不断地测试。最重要的是，第一次做不好没关系，多做几次就会了。

现在我会做的菜越来越多：红烧肉、麻婆豆腐、清蒸鱼、酸辣土豆丝、番茄牛腩汤。周末的时候，我常常请朋友来家里吃饭。大家一起包饺子，有人擀皮，有人调馅，有人负责包，包得好看不好看都无所谓，煮出来都是一样的香。

学习编程

很多人觉得编程很难，其实刚开始的时候，最难的不是语法，而是习惯用计算机的方式去思考问题。计算机只会按照你写的步骤一步一步地执行，它不会猜你心里想的是什么。所以写程序之前，最好先用自己的话把步骤写下来，想清楚每一步的输入是什么，输出是什么。

遇到错误的时候不要慌。先仔细读错误信息，看看是哪一行出了问题。如果看不懂，就把程序缩小，只保留出错的那一部分，再一点一点地检查。很多时候，你在向别人解释问题的过程中，自己就找到了答案。

写代码的时候，名字要起得清楚。一个叫做 x 的变量，过了一个星期你自己都不记得它是什么意思；一个叫做 total_price 的变量，别人一看就明白。函数也一样，一个函数最好只做一件事，名字就说明它做的那件事。

测试也很重要。每写完一个小功能，就写几个测试来检查它是不是正确。测试不只是为了找错误，也是为了以后修改代码的时候有信心：只要测试都通过了，就说明原来的功能没有被破坏。

旅行日记

十月三号，晴。早上六点起床，坐七点半的火车去山里。火车上人不多，窗外是一片一片的稻田，已经收割了一半。十点左右到了小镇，在车站旁边的小店吃了一碗牛肉面，面很筋道，汤有点辣。

下午沿着山路往上走，路边有很多竹子，风一吹就沙沙地响。走了两个小时，到了半山腰的一座小庙。庙里只有一位老和尚，他给我们倒了茶，说这座庙已经有四百多年的历史了。从庙门口往下看，整个山谷都在脚下，远处的小镇像一张画。

十月四号，多云。早上在山顶看日出，可惜云太多，只看到了一点点红光。下山的时候走了另一条路，经过一个小村子，村口有一棵很老的银杏树，叶子全黄了，地上铺了厚厚的一层。一位大妈在树下卖自己做的柿饼，我们买了两袋，准备带回去送给同事。

晚上回到城里，虽然很累，但是心情很好。这次旅行花了不到五百块钱，却看到了很多平时看不到的风景。下次有时间，还想再去一次。

关于时间

小时候总觉得时间过得很慢，一个暑假好像永远也过不完。长大以后，时间好像越来越快，一年一眨眼就过去了。有人说，这是因为小时候每天都有新鲜的事情，记忆里的内容多，所以觉得时间长；长大以后，每天的生活都差不多，记忆里的内容少，所以觉得时间短。

如果这个说法是对的，那么让时间变"慢"的办法，就是多做一些新的事情：去一个没去过的地方，读一本没读过的书，学一样以前不会的东西。哪怕只是换一条路回家，也能让这一天和别的日子有一点不同。

喝茶

我们家的人都爱喝茶。爷爷喜欢喝绿茶，每年春天清明节前后，他都要托朋友从南方买一斤新茶。泡绿茶的水不能太烫，八十度左右最好，不然茶叶会被烫熟，味道就苦了。爷爷用的是一个透明的玻璃杯，他说看着茶叶在水里慢慢展开，是一种享受。

爸爸喜欢喝红茶，冬天的时候还会加一点牛奶和糖。妈妈喜欢喝花茶，茉莉花的香味很浓，整个客厅都闻得到。我什么茶都喝，但是最喜欢的是乌龙茶，因为它不像绿茶那么淡，也不像红茶那么重，刚刚好。

以前家里来了客人，第一件事就是泡茶。主人给客人倒茶，客人用手指在桌子上轻轻敲两下，表示感谢。这些小小的习惯，现在的年轻人已经不太知道了，可是每次回老家，看到爷爷认真地烧水、洗杯、泡茶，我就觉得，有些东西还是值得留下来的。

一个问题

老师在黑板上写了一道题：一个池子有两根水管，一根进水，一根出水。只开进水管，三个小时可以把池子装满；只开出水管，五个小时可以把满池的水放完。如果两根水管同时打开，需要几个小时才能把空池子装满？

同学们算了半天，有人说八个小时，有人说两个小时，还有人说永远装不满。老师笑着说：进水管每小时装满三分之一，出水管每小时放掉五分之一，两个一起开，每小时能装满十五分之二，所以需要七个半小时。大家这才明白，原来要先算每小时的速度，再算总的时间。

搬家

去年夏天我们搬了一次家。新房子离公司近了很多，以前上班要坐一个小时的地铁，现在骑自行车十五分钟就到了。可是搬家真的很累。光是整理书就花了整整两天，我们一共装了三十多个箱子，每个箱子上都写了里面是什么，放到哪个房间。

搬家公司的师傅很专业，一个上午就把所有的家具和箱子都搬上了六楼。最难搬的是那台旧钢琴，四个人抬着，一层一层地往上走，每到一个拐角都要停下来商量怎么转弯。钢琴放好以后，师傅们坐在地上喘气，我赶紧给他们每人拿了一瓶冰水。

新家的窗户朝南，阳光很好。阳台上可以种花，我买了几盆茉莉和薄荷，还有一棵小小的柠檬树。邻居是一对退休的老夫妻，人很热情，我们搬进来的第一天，他们就送来了一盘自己包的饺子。住了一年，我越来越喜欢这个地方了。

下棋

我的外公喜欢下象棋。每天吃完午饭，他就拿着棋盘去小区门口的凉亭，那里总有几个老朋友在等他。他们下棋的时候很安静，旁边看的人反而比下棋的人还着急，常常忍不住出主意，结果被下棋的人瞪一眼。

小时候外公教我下棋，他说下棋最重要的不是吃掉对方的棋子，而是想清楚下一步、下两步甚至下三步会怎么样。他还说，输了不要紧，要想一想为什么输，下次就不会犯同样的错误。我现在下棋还是下不过他，但是这些话我一直记得。

图书馆

大学的图书馆有七层，一楼是报刊阅览室，二楼到五楼是各个学科的书库，六楼是自习室，七楼是古籍部。考试前的一个月，自习室里总是坐满了人，很多同学早上六点半就在门口排队，开门以后跑着上楼抢座位。

我最喜欢的是四楼靠窗的一个角落。那里放的是历史和地理方面的书，来的人不多，很安静。窗外是一片小树林，春天的时候，树上开满了白色的花，风一吹，花瓣就落在窗台上。我在那里读完了很多本书，也在那里写完了我的毕业论文。

毕业那天，我最后一次去图书馆还书。管理员阿姨看了看我的借书记录，笑着说：四年借了三百多本书，你是我们这儿的老读者了。我也笑了，心里却有一点难过。走出图书馆的时候，我回头看了很久。

春节

春节是中国最重要的节日。过年之前，家家户户都要大扫除，把屋子里里外外打扫得干干净净，意思是把旧的一年的不好的东西都扫出去。然后贴春联、贴福字、挂灯笼，门上的福字常常倒着贴，因为"福倒了"听起来像"福到了"。

除夕晚上，全家人坐在一起吃年夜饭。北方人一定要吃饺子，南方人常常吃年糕和鱼，因为"鱼"和"余"的发音一样，表示每年都有剩余。吃完饭，大家一起看电视上的春节联欢晚会，一边看一边聊天、嗑瓜子。到了十二点，外面的鞭炮声响成一片，新的一年就开始了。

大年初一，孩子们穿上新衣服，给长辈拜年，长辈给孩子们发红包。接下来的几天，大家走亲戚、看朋友，一直热闹到正月十五的元宵节。元宵节晚上要吃汤圆、看花灯、猜灯谜，过完元宵节，这个年才算真正过完了。

雨天

下雨的日子，我喜欢待在家里。泡一壶热茶，找一本一直想看却没时间看的书，坐在窗边慢慢地读。雨点打在玻璃上，发出细细的声音，楼下偶尔有汽车开过，溅起一片水花。这样的下午，时间好像停下来了。

小时候下雨，妈妈总是提醒我带伞，可是我常常忘记。放学的时候，校门口站满了来接孩子的家长，每个人手里都拿着一把伞。我站在屋檐下等雨停，等着等着，就看见妈妈撑着一把蓝色的大伞，从人群里走过来。那把伞我们家用了很多年，后来坏了，妈妈也舍不得扔。
)corpus";

}  // namespace

std::string_view BuiltinTrainingCorpus() {
  static const std::string* const corpus =
      new std::string(std::string(kProse) + "\n" + kCode + "\n" + kChinese);
  return *corpus;
}

}  // namespace moetier
